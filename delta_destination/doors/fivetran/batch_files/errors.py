"""Errors of reading a batch file: each names the file (basename) and never its contents."""
from __future__ import annotations

from ....errors import InvalidRequest


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
