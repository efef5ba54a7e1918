"""Typed errors, raised where a problem happens and turned into an answer by each door.

The core knows nothing of gRPC, Airbyte or Conduit: every door maps these classes to
its own answer in one place (a gRPC status or Task, an Airbyte TRACE, a Conduit nack).

Messages must never contain keys, credentials or customer values: name the file,
table, column and row, never the value.
"""
from __future__ import annotations


class DestinationError(Exception):
    """Base class of every error the doors know how to answer."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidRequest(DestinationError):
    """The request or its input is malformed (missing table, unsafe name, bad value ...)."""


class UnsafeName(InvalidRequest):
    """A schema/table name that cannot be used as a path component."""


class SchemaMismatch(InvalidRequest):
    """Input that does not fit the table (unknown column, missing key ...)."""


class ValueConversionError(InvalidRequest):
    """A value that does not fit its column type. Carries the column and row, never the value."""


class TableNotFound(DestinationError):
    pass


class TableAlreadyExists(DestinationError):
    pass


class UnsupportedOperation(DestinationError):
    """The operation is valid but this destination (or engine) does not do it."""


class UnsupportedTableFeature(UnsupportedOperation):
    """The table uses a Delta feature the current engine cannot write safely."""


class EngineError(DestinationError):
    """The Spark engine failed in a way that is not the input's fault."""


class EngineUnavailable(EngineError):
    """The engine could not be reached after retries (transient problems that persisted)."""


class MemoryBudgetExceeded(EngineError):
    """The engine would need more memory than it is allowed: refused before it starts."""


class CustomerActionRequired(DestinationError):
    """Something only the customer can fix (warehouse not writable, ...)."""


class RequesterGone(DestinationError):
    """Whoever asked is gone (a cancelled request, a dead host): the commit was abandoned and
    nothing was written; the requester's retry or replay sends the data again."""
