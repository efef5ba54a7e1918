"""Errors of the Conduit door. Like the core's, they carry names and counts, never values."""
from __future__ import annotations

from ...errors import DestinationError, InvalidRequest


class HandshakeError(DestinationError):
    """The process was not started by a go-plugin host that speaks a protocol we serve."""


class InvalidConfig(InvalidRequest):
    """A connector setting is missing, unknown or malformed (Configure answers INVALID_ARGUMENT)."""


class BadRecord(InvalidRequest):
    """One OpenCDC record cannot be applied (it is nacked; the rest of the batch goes on)."""


class SchemaUnavailable(DestinationError):
    """An Avro schema named by a record's metadata could not be fetched from Conduit."""


class TableWriteFailed(DestinationError):
    """A table's commit for a batch failed (nothing of it was written); every record of that
    table in the batch is nacked with this. `cause` is the core's (or engine's) error."""

    def __init__(self, table: str, cause: BaseException):
        detail = cause.message if isinstance(cause, DestinationError) else f"unexpected {type(cause).__name__}"
        super().__init__(f"table {table}: {detail}; nothing of this batch was written to it")
        self.cause = cause


class HostGone(DestinationError):
    """The host (Conduit) is gone or cannot take acks any more: the commit is refused, nothing
    is written, and Conduit sends the records again to the next connector it starts."""


class Superseded(DestinationError):
    """A newer instance of this connector claimed the table (a higher writer epoch): this
    instance's commit is refused so that it can never undo the newer one's."""
