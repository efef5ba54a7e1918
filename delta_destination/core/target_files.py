"""Which files of a table a keyed write can touch, and the predicate on the target that says so.

A MERGE whose ON clause is only the key equality joins the batch with every file of the table:
a 100-row increment into a 10M-row table then costs what the table costs. Two facts make it cheap:

- The Delta log keeps per-file [min, max] statistics of every column, so the files that can hold
  any of a batch's keys are known before the engine runs (`candidate_files`, pure).
- A predicate on the target alone in the ON clause (`t.id IN (...)`, or key ranges) is one that
  Delta on Apache Spark uses to skip files by those statistics before its join (its MERGE's
  "target-only predicates"); the predicate keeps every row any batch key can match, so the
  MERGE's result is the same with or without it (`target_predicate`, pure).

What each engine does with the predicate was measured, not assumed (docs/big-tables.md): Delta on
Spark skips the files; embedded Sail 0.7.2 collects target-only predicates but reads every file
anyway (same bytes read with and without, and a long IN list made its join slower), so the
writer gives the predicate only to engines whose dialect says they skip by it.

Only values whose SQL literal is exact are used: integers, and strings of printable ASCII (a
mangled literal would make a stored key look absent, and the MERGE would insert it twice).
Keys of other types, or strings outside that set, get no predicate: the MERGE reads every file,
as before, and stays correct.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..names import quote_ident as q, quote_string
from .delta_log import TableSnapshot
from .key_ranges import INTEGER_TYPES
from .model import TableSchema

# Up to this many distinct keys per column the predicate is an IN list (Delta's data skipping
# tests each value against a file's [min, max]); beyond it, ranges of sorted keys.
IN_LIST_MAX = 1000
# At most this many ranges: split at the widest gaps between sorted keys.
RANGES_MAX = 64
STRING_TYPES = frozenset({"string"})


@dataclass(frozen=True)
class FileStats:
    """The live files of a table with the statistics of its key columns (one row per file:
    `size_bytes`, `min.<key>`, `max.<key>` under the keys' logical names; a statistic the writer
    did not record is null), and which keys have statistics that order like the engine's values
    (integers; strings compare byte-wise in both)."""

    files: pa.Table
    ordered_keys: tuple[str, ...]

    @property
    def count(self) -> int:
        return self.files.num_rows

    @property
    def bytes(self) -> int:
        if self.files.num_rows == 0:
            return 0
        return int(pc.sum(self.files.column("size_bytes")).as_py() or 0)

    def bytes_of(self, mask: pa.Array) -> int:
        picked = self.files.column("size_bytes").filter(mask)
        return int(pc.sum(picked).as_py() or 0) if len(picked) else 0


def file_stats(snapshot: TableSnapshot, keys: Sequence[str]) -> FileStats:
    """The table's live files and the statistics of its key columns, from its snapshot."""
    adds = snapshot.adds
    columns = {"size_bytes": adds.column("size_bytes")}
    ordered = []
    for key in keys:
        field = snapshot.fields.get(key)
        if field is None or field.type not in INTEGER_TYPES | STRING_TYPES:
            continue
        lo, hi = f"min.{field.physical}", f"max.{field.physical}"
        if lo not in adds.column_names or hi not in adds.column_names:
            continue
        columns[f"min.{key}"] = adds.column(lo)
        # A string max may be truncated (Delta stops at 32 characters and marks the cut): such a
        # file's max proves nothing, so its range is left open above.
        columns[f"max.{key}"] = _open_truncated(adds.column(hi)) if field.type in STRING_TYPES else adds.column(hi)
        ordered.append(key)
    return FileStats(pa.table(columns), tuple(ordered))


def _open_truncated(col):
    """Maxima of 32 characters or more may be a truncated prefix: null (unknown) there."""
    return pc.if_else(pc.less(pc.utf8_length(col), 32), col, pa.scalar(None, col.type))


def candidate_files(stats: FileStats, batch_keys: dict[str, pa.Array]) -> pa.Array:
    """Pure: per file, can it hold a row whose key is in the batch? For every key column with
    ordered statistics, some batch value must lie in the file's [min, max]; missing statistics
    prove nothing (a candidate). With several key columns this is a superset (each column is
    tested alone).
    >>> files = pa.table({"size_bytes": [10, 10, 10], "min.id": [1, 50, 100], "max.id": [40, 90, None]})
    >>> candidate_files(FileStats(files, ("id",)), {"id": pa.array([60, 150])}).to_pylist()
    [False, True, True]
    >>> candidate_files(FileStats(files, ("id",)), {"id": pa.array([1, 40])}).to_pylist()
    [True, False, False]
    """
    n = stats.count
    keep = np.ones(n, dtype=bool)
    for key in stats.ordered_keys:
        values = batch_keys.get(key)
        if values is None or len(values) == 0:
            continue
        ordered = np.sort(np.asarray(pc.unique(values).to_numpy(zero_copy_only=False)))
        lo = stats.files.column(f"min.{key}")
        hi = stats.files.column(f"max.{key}")
        lo_known = ~np.asarray(pc.is_null(lo).to_numpy(zero_copy_only=False))
        hi_known = ~np.asarray(pc.is_null(hi).to_numpy(zero_copy_only=False))
        lo_v = _filled(lo, ordered[0])
        hi_v = _filled(hi, ordered[-1])
        # The first batch value >= the file's min must exist and be <= the file's max.
        at = np.searchsorted(ordered, lo_v, side="left")
        inside = at < len(ordered)
        first = ordered[np.minimum(at, len(ordered) - 1)]
        holds = inside & (first <= hi_v)
        keep &= np.where(lo_known & hi_known, holds, np.where(lo_known, inside, True))
    return pa.array(keep)


def _filled(col, fill) -> np.ndarray:
    """The statistics as numbers (or strings), nulls replaced by `fill` (their masks decide)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if col.null_count:
        col = pc.fill_null(col, pa.scalar(fill, col.type))
    return np.asarray(col.to_numpy(zero_copy_only=False))


def literal(value) -> Optional[str]:
    """An exact SQL literal of a key value, or None when there is none here.
    >>> literal(42), literal("ab'c"), literal("é"), literal(True)
    ('42', "'ab\\\\'c'", None, None)
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, str) and all(" " <= ch <= "~" for ch in value):
        return quote_string(value)
    return None


def column_predicate(column: str, values: Sequence) -> Optional[str]:
    """The predicate `t.<column>` must satisfy for a row to match one of `values` (distinct,
    non-null): an IN list, or for many integers (or strings) ranges of the sorted values; None
    when a value has no exact literal.
    >>> column_predicate("id", [3, 1, 2])
    't.`id` IN (1, 2, 3)'
    >>> column_predicate("id", list(range(0, 3000, 3)) + [10**6, 10**6 + 5])
    '(t.`id` BETWEEN 0 AND 2997 OR t.`id` BETWEEN 1000000 AND 1000005)'
    >>> column_predicate("k", ["b", "a"]), column_predicate("k", ["a", "\\n"])
    ("t.`k` IN ('a', 'b')", None)
    """
    ordered = sorted(values)
    literals = [literal(v) for v in ordered]
    if not literals or any(x is None for x in literals):
        return None
    col = f"t.{q(column)}"
    if len(ordered) <= IN_LIST_MAX:
        return f"{col} IN ({', '.join(literals)})"
    if isinstance(ordered[0], str):
        return f"{col} BETWEEN {literals[0]} AND {literals[-1]}"
    bounds = key_ranges(np.asarray(ordered, dtype=np.int64), RANGES_MAX)
    return "(" + " OR ".join(f"{col} BETWEEN {lo} AND {hi}" for lo, hi in bounds) + ")"


def key_ranges(ordered: np.ndarray, most: int) -> list[tuple[int, int]]:
    """Sorted integers as at most `most` [lo, hi] ranges covering all of them, split at the
    widest gaps among those wider than four times the median gap (evenly spread keys stay one
    range: splitting them would skip nothing).
    >>> key_ranges(np.array([1, 2, 3, 10, 11, 50]), 2)
    [(1, 11), (50, 50)]
    >>> key_ranges(np.array([5]), 4)
    [(5, 5)]
    """
    if len(ordered) == 1 or most <= 1:
        return [(int(ordered[0]), int(ordered[-1]))]
    gaps = np.diff(ordered)
    wide = np.flatnonzero(gaps > max(1, 4 * float(np.median(gaps))))
    cut = np.sort(wide[np.argsort(gaps[wide], kind="stable")[::-1][:most - 1]])
    out, start = [], 0
    for c in cut:
        out.append((int(ordered[start]), int(ordered[c])))
        start = c + 1
    out.append((int(ordered[start]), int(ordered[-1])))
    return out


def target_predicate(table: TableSchema, keys: Sequence[str], batch_keys: dict[str, pa.Array]) -> Optional[str]:
    """The predicate on the target (alias `t`) that keeps every row a batch key can match: one
    term per key column, joined by AND; None when a key column has values without an exact
    literal (then the MERGE reads every file).
    >>> from .model import Column, DataType
    >>> t = TableSchema("t", (Column("a", DataType.LONG, primary_key=True), Column("b", DataType.STRING, primary_key=True)))
    >>> target_predicate(t, ["a", "b"], {"a": pa.array([2, 1, 2]), "b": pa.array(["x", "x", "y"])})
    "t.`a` IN (1, 2) AND t.`b` IN ('x', 'y')"
    """
    terms = []
    for key in keys:
        values = batch_keys.get(key)
        if values is None or len(values) == 0:
            return None
        distinct = pc.unique(values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values)
        if distinct.null_count:
            return None
        term = column_predicate(key, distinct.to_pylist())
        if term is None:
            return None
        terms.append(term)
    return " AND ".join(terms) if terms else None


def batch_key_values(source: pa.Table, table: TableSchema, keys: Sequence[str]) -> dict[str, pa.Array]:
    """The key columns of a positional merge source (core/writer.py: c<i> = table column i)."""
    names = table.column_names
    return {k: source.column(f"c{names.index(k)}") for k in keys}


@dataclass(frozen=True)
class TouchedFiles:
    """What a keyed write into a table can touch, from its log: the files and bytes that can hold
    a batch key, of how many."""

    files: int
    bytes: int
    of_files: int
    of_bytes: int

    @property
    def skips_any(self) -> bool:
        return self.files < self.of_files

    def describe(self) -> str:
        """
        >>> TouchedFiles(2, 2048, 40, 4 * 2**20).describe()
        '2 of 40 files can hold a batch key'
        """
        return f"{self.files} of {self.of_files} files can hold a batch key"


def touched_files(stats: FileStats, batch_keys: dict[str, pa.Array]) -> TouchedFiles:
    mask = candidate_files(stats, batch_keys)
    picked = int(pc.sum(mask).as_py() or 0) if len(mask) else 0
    return TouchedFiles(picked, stats.bytes_of(mask) if picked else 0, stats.count, stats.bytes)
