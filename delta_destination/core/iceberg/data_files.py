"""A Delta add action as an Iceberg data file: the same Parquet file, its Delta statistics where
they mean the same in Iceberg (pure: tests/unit/test_iceberg_plan.py).

Carried: the record count, and per column the null count and value count. Lower and upper bounds
only for integers, longs, dates and booleans, whose Delta statistics are exact: Delta truncates
strings in its statistics and stores timestamps at millisecond precision (a max below the true max
would make an Iceberg reader skip a file that holds the row), and floats' NaN and decimals'
encodings are not worth the risk. A reader with fewer bounds reads more files, never wrong rows.
"""
from __future__ import annotations

import datetime as dt
import json
from typing import Callable, Optional

from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record
from pyiceberg.types import BooleanType, DateType, IcebergType, IntegerType, LongType

from .plan import FileAdd
from .schemas import MirroredSchema

_EXACT_BOUNDS = (IntegerType, LongType, DateType, BooleanType)
_EPOCH = dt.date(1970, 1, 1)


def file_location(table_location: str, path: str) -> str:
    """The absolute location of a file of the table (Delta's add paths are relative; an absolute
    URL, as shallow clones write, is kept).
    >>> file_location("/w/s/t", "part-1.parquet"), file_location("s3://b/t/", "p.parquet")
    ('/w/s/t/part-1.parquet', 's3://b/t/p.parquet')
    """
    if "://" in path or path.startswith("/"):
        return path
    return table_location.rstrip("/") + "/" + path


def _bound(value: object, typ: IcebergType) -> Optional[bytes]:
    """The Iceberg single-value serialization of a Delta statistics value, for exact types only.
    >>> _bound("1970-01-11", DateType()), _bound(5, LongType()), _bound("x", LongType())
    (b'\\n\\x00\\x00\\x00', b'\\x05\\x00\\x00\\x00\\x00\\x00\\x00\\x00', None)
    """
    try:
        if isinstance(typ, DateType) and isinstance(value, str):
            return to_bytes(typ, (dt.date.fromisoformat(value) - _EPOCH).days)
        if isinstance(typ, (IntegerType, LongType)) and isinstance(value, int) and not isinstance(value, bool):
            return to_bytes(typ, value)
        if isinstance(typ, BooleanType) and isinstance(value, bool):
            return to_bytes(typ, value)
    except (ValueError, OverflowError, TypeError):
        return None
    return None


def data_file(table_location: str, add: FileAdd, schema: MirroredSchema, count_rows: Callable[[str], int]) -> DataFile:
    """The Iceberg data file of a Delta add action under the table's current mirrored schema;
    `count_rows(location)` counts a file's rows where its statistics do not (readers skip a file
    whose record count is 0, so a count is never guessed)."""
    stats = {}
    if add.stats:
        try:
            stats = json.loads(add.stats) or {}
        except ValueError:
            stats = {}
    records = stats.get("numRecords")
    if not isinstance(records, int):
        records = count_rows(file_location(table_location, add.path))
    nulls, lows, highs = stats.get("nullCount") or {}, stats.get("minValues") or {}, stats.get("maxValues") or {}
    null_counts, value_counts, lower, upper = {}, {}, {}, {}
    for f in schema.schema.fields:
        name = schema.physical[f.field_id]
        if isinstance(nulls.get(name), int):
            null_counts[f.field_id] = nulls[name]
        if isinstance(records, int):
            value_counts[f.field_id] = records
        if isinstance(f.field_type, _EXACT_BOUNDS):
            lo, hi = _bound(lows.get(name), f.field_type), _bound(highs.get(name), f.field_type)
            if lo is not None and hi is not None:
                lower[f.field_id], upper[f.field_id] = lo, hi
    return unpartitioned(DataFile.from_args(
        content=DataFileContent.DATA, file_path=file_location(table_location, add.path), file_format=FileFormat.PARQUET,
        partition=Record(), record_count=records, file_size_in_bytes=add.size,
        value_counts=value_counts, null_value_counts=null_counts, lower_bounds=lower, upper_bounds=upper,
    ))


def removed_file(table_location: str, path: str) -> DataFile:
    """A data file to remove: Iceberg finds the one it holds by its location."""
    return unpartitioned(DataFile.from_args(content=DataFileContent.DATA, file_path=file_location(table_location, path),
                                            file_format=FileFormat.PARQUET, partition=Record(), record_count=0,
                                            file_size_in_bytes=0))


def unpartitioned(f: DataFile) -> DataFile:
    """The file under the table's one (unpartitioned) spec, which pyiceberg's snapshot producers ask."""
    f.spec_id = 0
    return f
