"""Change sets for tests that drive the core in-process (tests/engines/test_core_library.py and the
object-store tests): typed Arrow rows for a table's schema, a ChangeSet of parts, an `orders` row,
and a table's rows read back with delta-rs (the independent reader) by key."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Optional

import pyarrow as pa

from delta_destination.core.changes import ChangeSet, Changes
from delta_destination.core.model import TableSchema
from delta_destination.core.types import arrow_type
from testkit.delta_read import read_delta_table

UTC = dt.timezone.utc


def typed(table: TableSchema, rows: list[dict], columns=None) -> pa.Table:
    """`rows` in the table's Arrow types (only `columns` when given)."""
    cols = [c for c in table.columns if columns is None or c.name in columns]
    return pa.table({c.name: pa.array([r.get(c.name) for r in rows], arrow_type(c)) for c in cols})


def changes(*parts: Changes) -> ChangeSet:
    cs = ChangeSet()
    for p in parts:
        cs.add(p)
    return cs


def order(i: int, name: str = "n", amount: str = "1.50", **more) -> dict:
    """A row of the tests' `orders` table (id, name, amount, at; `more` for extra columns)."""
    return {"id": i, "name": f"{name}{i}", "amount": Decimal(amount), "at": dt.datetime(2024, 1, 1, tzinfo=UTC), **more}


def rows_by_id(location: str, storage_options: Optional[dict] = None) -> dict:
    """The table's rows read back with delta-rs, by their `id`."""
    return {r["id"]: r for r in read_delta_table(location, storage_options).to_pylist()}
