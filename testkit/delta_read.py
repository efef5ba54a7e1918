"""Read a Delta table back independently of Spark, for tests and the benchmark.

delta-rs (the `deltalake` package) reads the table through its own query engine
(QueryBuilder), which applies deletion vectors and column mapping. We avoid
`DeltaTable.to_pyarrow_table()` / `to_pyarrow_dataset()`: on deltalake 1.6.6 they
refuse both features, and abort the interpreter at exit about half the time
("terminate called without an active exception").
"""
from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder


def delta_version(path: str) -> int:
    return DeltaTable(str(path)).version()


def delta_properties(path: str) -> dict:
    return dict(DeltaTable(str(path)).metadata().configuration)


def read_delta_table(path: str) -> pa.Table:
    dt = DeltaTable(str(path))
    schema = pa.schema([f.remove_metadata() for f in pa.schema(dt.schema().to_arrow())])
    got = pa.table(QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all())
    cols = [got.column(f.name).cast(f.type) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)
