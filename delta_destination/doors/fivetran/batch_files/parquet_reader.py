"""Parquet batch files, as Fivetran writes them from Avro schemas.

Parquet needs random access, so a decrypted file is held in memory -- never on disk.
"""
from __future__ import annotations

import io
import os

import pyarrow as pa

from ....core.model import TableSchema
from . import errors
from .cells import CellConverter
from .csv_reader import check_header
from .params import BatchData, FileParams
from .streams import CHUNK, open_plaintext


def read_parquet(path: str, key, params: FileParams, table: TableSchema, allow_unmodified: bool) -> BatchData:
    """Parquet batches, as Fivetran writes them from Avro schemas.

    Unmodified markers in Parquet update files are not documented. The safe
    reading used here: in a column stored as *string*, a value equal to
    unmodified_string is "unmodified" (and one equal to null_string is NULL,
    as in CSV); a typed (non-string) column cannot hold a marker, so it has no
    unmodified cells and its Parquet NULL means NULL.
    """
    import pyarrow.parquet as pq

    name = os.path.basename(path)
    buf = io.BytesIO()
    plain = open_plaintext(path, key, params)
    try:
        while True:
            chunk = plain.read(CHUNK)
            if not chunk:
                break
            buf.write(chunk)
    finally:
        plain.close()
    buf.seek(0)
    try:
        data = pq.read_table(buf)
    except (pa.ArrowException, OSError, ValueError):
        raise errors.ParquetFormatError(f"file {name}: not a readable Parquet file") from None
    finally:
        del buf
    check_header(name, data.schema.names, table, what="Parquet")
    conv = CellConverter(name, table, data.schema.names, params, allow_unmodified)
    arrays = {}
    for col in conv.columns:
        arr = data.column(col.name).combine_chunks()
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
            arrays[col.name] = conv.column(col, arr)
            continue
        arrays[col.name] = (conv.typed(col, arr), None)
    conv.add_arrays(arrays, data.num_rows)
    return conv.result()

