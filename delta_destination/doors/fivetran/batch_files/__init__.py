"""Fivetran batch files -> typed Arrow: decrypt (AES-256-CBC) and decompress as streams,
parse CSV or Parquet, convert every cell to the table's types.

Every error raised here is a typed error (errors.py or delta_destination/errors.py), and the messages
name the file (basename), the column and the 1-based data row only -- never a cell
value, a key or a library message that could quote file contents.
"""
from __future__ import annotations

from typing import Optional

from ....core.model import TableSchema
from .csv_reader import read_csv
from .params import BatchData, Compression, Encryption, FileFormat, FileParams
from .parquet_reader import read_parquet
from .streams import open_plaintext

__all__ = ["BatchData", "Compression", "Encryption", "FileFormat", "FileParams", "open_plaintext", "read_batch_file"]


def read_batch_file(path: str, key: Optional[bytes], params: FileParams, table: TableSchema,
                    *, allow_unmodified: bool) -> BatchData:
    """Read one batch file into the table's Arrow types (unmodified markers only where allowed)."""
    if FileFormat(params.file_format) == FileFormat.PARQUET:
        return read_parquet(path, key, params, table, allow_unmodified)
    return read_csv(path, key, params, table, allow_unmodified)
