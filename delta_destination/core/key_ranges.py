"""Can any key of a batch already be in the table? Answered from the Delta log where it can
be proven, without the engine.

Before a keyed write the core asks the engine whether any source key exists (a join of the
batch with the table's key column) so that batches of new keys are a plain append instead of
a MERGE. On Apache Spark that probe costs seconds even when the table is empty (measured
5-20 s at 1M rows on 2 cores, docs/benchmarks.md), and it is pointless for the two commonest
cases: the first sync into an empty table, and tables whose integer keys only grow. The
Delta log's per-file statistics answer those exactly: a file can hold a source key only if,
for every key column, its [min, max] meets the batch's. Only integer key columns are used:
Delta truncates string statistics and rounds timestamps to milliseconds, so their ranges
prove nothing. Files with deletion vectors keep the statistics of all their rows (a
superset): still safe. Anything not proven falls back to the engine's probe.
"""
from __future__ import annotations

from typing import Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .delta_log import TableSnapshot
from .model import TableSchema

INTEGER_TYPES = frozenset({"byte", "short", "integer", "long"})


def ranges_disjoint(files: pa.Table, source: dict[str, tuple[int, int]]) -> bool:
    """Pure: True when no file (a row of `min.<col>`, `max.<col>` statistics, named by the
    source's keys) can hold a key in the source's [lo, hi] ranges; False when unsure.
    >>> files = pa.table({"min.id": [1, 50], "max.id": [40, 90]})
    >>> ranges_disjoint(files, {"id": (91, 120)}), ranges_disjoint(files, {"id": (45, 60)})
    (True, False)
    """
    if files.num_rows == 0:
        return True
    if not source:
        return False
    excluded = pa.array([False] * files.num_rows)
    for col, (lo, hi) in source.items():
        lo_name, hi_name = f"min.{col}", f"max.{col}"
        if lo_name not in files.column_names or hi_name not in files.column_names:
            continue
        fmin, fmax = files.column(lo_name), files.column(hi_name)
        # A file is out of this column's range when its max is below lo or its min above hi;
        # missing statistics (null) prove nothing.
        outside = pc.or_(pc.less(fmax, lo), pc.greater(fmin, hi))
        excluded = pc.or_(excluded, pc.fill_null(outside, False))
    return bool(pc.all(excluded).as_py())


def source_ranges(source: pa.Table, table: TableSchema, keys: Sequence[str]) -> dict[str, tuple[int, int]]:
    """[min, max] of each integer key column of the positional merge source (c<i> columns)."""
    out = {}
    for k in keys:
        col = source.column(f"c{table.column_names.index(k)}")
        if not pa.types.is_integer(col.type) or col.null_count == len(col):
            continue
        mm = pc.min_max(col)
        out[k] = (mm["min"].as_py(), mm["max"].as_py())
    return out


def keys_cannot_match(snapshot: Optional[TableSnapshot], table: TableSchema, keys: Sequence[str],
                      source: pa.Table) -> bool:
    """True when the table's snapshot proves no source key is stored; False when unsure (also
    where the destination could not read the log itself: `snapshot` None)."""
    if snapshot is None or source.num_rows == 0:
        return False
    ranges = {}
    for key, bounds in source_ranges(source, table, keys).items():
        field = snapshot.fields.get(key)
        if field is None or field.type not in INTEGER_TYPES:
            continue
        ranges[field.physical] = bounds
    return ranges_disjoint(snapshot.adds, ranges)
