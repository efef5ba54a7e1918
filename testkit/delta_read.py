"""Read a Delta table back independently of Spark, for tests and the benchmark.

delta-rs (the `deltalake` package) replays the log and lists the live files; the
files are read with pyarrow.parquet. We avoid `DeltaTable.to_pyarrow_table()` /
`to_pyarrow_dataset()`: on deltalake 1.6.6 they abort the interpreter at exit
about half the time ("terminate called without an active exception"), which
would turn a green pytest run red.
"""
from __future__ import annotations

from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable


def _local_path(uri: str) -> str:
    return unquote(urlparse(uri).path) if uri.startswith("file:") else uri


def delta_version(path: str) -> int:
    return DeltaTable(str(path)).version()


def delta_properties(path: str) -> dict:
    return dict(DeltaTable(str(path)).metadata().configuration)


def read_delta_table(path: str) -> pa.Table:
    dt = DeltaTable(str(path))
    schema = pa.schema(dt.schema().to_arrow())
    mapping = _physical_names(dt)
    parts = []
    for uri in dt.file_uris():
        t = pq.read_table(_local_path(uri))
        if mapping:
            t = t.rename_columns([mapping.get(n, n) for n in t.column_names])
        cols = []
        for field in schema:
            if field.name in t.column_names:
                cols.append(t.column(field.name).cast(field.type))
            else:  # file written before the column was added
                cols.append(pa.nulls(t.num_rows, field.type))
        parts.append(pa.Table.from_arrays(cols, schema=schema))
    if not parts:
        return schema.empty_table()
    return pa.concat_tables(parts)


def _physical_names(dt: DeltaTable) -> dict:
    """physical -> logical column names when Delta column mapping is on."""
    out = {}
    for f in dt.schema().fields:
        phys = (f.metadata or {}).get("delta.columnMapping.physicalName")
        if phys:
            out[str(phys).strip('"')] = f.name
    return out
