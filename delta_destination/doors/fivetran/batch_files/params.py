"""What a batch request says about its files: compression, encryption, format, markers."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

import pyarrow as pa

class Compression(enum.IntEnum):
    OFF = 0
    ZSTD = 1
    GZIP = 2


class Encryption(enum.IntEnum):
    NONE = 0
    AES = 1


class FileFormat(enum.Enum):
    CSV = "csv"
    PARQUET = "parquet"


@dataclass(frozen=True)
class FileParams:
    compression: Compression
    encryption: Encryption
    null_string: str
    unmodified_string: str
    file_format: FileFormat = FileFormat.CSV


@dataclass
class BatchData:
    """One file's rows in the table's types, and where unmodified markers stood."""

    values: pa.Table
    unmodified: Optional[pa.Table]
    num_rows: int

