"""The Airbyte door's own typed errors (the core's live in delta_destination/errors.py).

Which Airbyte failure_type each error becomes is decided in one place, main.py."""
from __future__ import annotations

from ...errors import DestinationError, InvalidRequest


class ConfigInvalid(DestinationError):
    """The connector config cannot be used (missing warehouse, unknown engine ...): config_error."""


class CatalogInvalid(DestinationError):
    """The configured catalog cannot become tables (unsafe or colliding names, a dedup stream
    without a primary key, a nested key path): config_error, nothing is written."""


class ProtocolViolation(InvalidRequest):
    """An input line that is not an AirbyteMessage, or a record for a stream the catalog
    does not configure: system_error after committing what earlier states cover."""


class RecordRejected(InvalidRequest):
    """A record that cannot be written without losing what identifies it (its data is not an
    object, its primary key is missing or does not fit): system_error, same handling."""
