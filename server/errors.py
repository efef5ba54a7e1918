"""Typed errors raised where problems happen; the protocol layer maps them to gRPC.

Messages must never contain keys, credentials or customer values: name the file,
the column, the row number, never the value.
"""
from __future__ import annotations

import grpc


class DestinationError(Exception):
    """Base class. `status` is the gRPC code the protocol layer answers with."""

    status: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidRequest(DestinationError):
    """The request itself is malformed (missing table, unsafe name, unknown enum ...)."""

    status = grpc.StatusCode.INVALID_ARGUMENT


class UnsafeName(InvalidRequest):
    """A schema/table name that cannot be used as a path component."""


class TableNotFound(DestinationError):
    status = grpc.StatusCode.NOT_FOUND


class TableAlreadyExists(DestinationError):
    status = grpc.StatusCode.ALREADY_EXISTS


class SchemaMismatch(InvalidRequest):
    """A batch file or request does not fit the table (unknown column, missing key ...)."""


class BatchFileError(InvalidRequest):
    """A batch file cannot be read. Subclasses say at which stage."""


class MissingKey(BatchFileError):
    pass


class DecryptionError(BatchFileError):
    """Wrong key, bad padding, truncated ciphertext."""


class DecompressionError(BatchFileError):
    pass


class CsvFormatError(BatchFileError):
    """Malformed CSV: unterminated quote, wrong field count, bad header, invalid UTF-8."""


class ParquetFormatError(BatchFileError):
    pass


class ValueConversionError(BatchFileError):
    """A value that does not fit its column type. Carries the column and row, never the value."""


class UnsupportedOperation(DestinationError):
    status = grpc.StatusCode.UNIMPLEMENTED


class EngineError(DestinationError):
    """The Spark engine failed in a way that is not the input's fault."""

    status = grpc.StatusCode.INTERNAL


class EngineUnavailable(EngineError):
    """The engine could not be reached after retries (transient problems that persisted)."""

    status = grpc.StatusCode.UNAVAILABLE


class CustomerActionRequired(DestinationError):
    """Something only the customer can fix (warehouse not writable, ...): answered as a Task."""

    status = grpc.StatusCode.FAILED_PRECONDITION
