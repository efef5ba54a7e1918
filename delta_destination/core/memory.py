"""The memory guard: refuse a MERGE the engine would grow past the memory budget with.

Embedded Sail 0.7.2 holds the whole target table in a hash join during MERGE (its build side
is the target, not the batch; see docs/sail-merge-memory.md), so its peak grows with the
table until the kernel kills the process. The dialect estimates that peak from the table's
size as the Delta log reports it; over the budget the request is refused before the engine
starts, with a message that points at the Apache Spark engine. Engines whose MERGE streams
the target (Apache Spark + Delta) give no estimate and are never refused.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import MemoryBudgetExceeded
from .delta_log import TableSnapshot

GB = 2**30


@dataclass(frozen=True)
class TableSize:
    """The table's live data files as the Delta log lists them."""

    files: int
    bytes: int
    rows: Optional[int]   # None when a writer left no row counts in its statistics


def table_size(snapshot: Optional[TableSnapshot]) -> Optional[TableSize]:
    """Sum of the live files' `add.size` (and numRecords) of a table's snapshot; None when the
    destination could not read the log itself (not measured: no guard there).
    >>> import pyarrow as pa
    >>> table_size(TableSnapshot(3, {}, {}, pa.table({"size_bytes": [10, 5], "num_records": [2, 1]})))
    TableSize(files=2, bytes=15, rows=3)
    >>> table_size(None) is None
    True
    """
    if snapshot is None:
        return None
    import pyarrow.compute as pc

    adds = snapshot.adds
    if adds.num_rows == 0:
        return TableSize(0, 0, 0)
    size = pc.sum(adds.column("size_bytes")).as_py() or 0
    rows = None
    if "num_records" in adds.column_names and adds.column("num_records").null_count == 0:
        rows = pc.sum(adds.column("num_records")).as_py()
    return TableSize(adds.num_rows, int(size), rows)


def gb(n: int) -> str:
    """
    >>> gb(3 * 2**29)
    '1.5 GB'
    """
    return f"{n / GB:.1f} GB"


def check_budget(display: str, engine: str, size: TableSize, estimate: Optional[int], budget: int) -> None:
    """Raises MemoryBudgetExceeded when the estimate passes the budget (None: no guard)."""
    if estimate is None or estimate <= budget:
        return
    rows = f"{size.rows:,} rows, " if size.rows is not None else ""
    raise MemoryBudgetExceeded(
        f"table {display} is too large for a MERGE on the {engine} engine: {rows}{size.files} files, "
        f"{gb(size.bytes)} of Parquet; the MERGE is estimated to need {gb(estimate)} of memory, over the "
        f"memory budget of {gb(budget)}. Nothing was written. Use the Apache Spark engine for tables this large "
        f"(--engine spark, or a remote Spark Connect endpoint with --spark-remote sc://host:port), "
        f"or raise the budget (--memory-budget-gb) on a machine with more memory")
