"""The pure parts of core/target_files.py: candidate files from key statistics, and the predicate
on the target, as exact strings (the engine tests run them: tests/engines/test_skipping_merge.py)."""
from __future__ import annotations

import pyarrow as pa

from delta_destination.core.model import Column, DataType, TableSchema
from delta_destination.core.target_files import (FileStats, IN_LIST_MAX, batch_key_values, candidate_files,
                                                 column_predicate, key_ranges, literal, target_predicate,
                                                 touched_files)

import numpy as np


def stats(**cols) -> FileStats:
    n = len(next(iter(cols.values())))
    keys = tuple(sorted({k.split(".", 1)[1] for k in cols}))
    return FileStats(pa.table({"size_bytes": [100] * n, **cols}), keys)


def test_candidates_at_the_edges_and_in_the_gaps():
    s = stats(**{"min.id": [0, 100, 200], "max.id": [49, 149, 249]})
    cases = {(0,): [True, False, False], (49,): [True, False, False], (50, 99): [False, False, False],
             (149, 200): [False, True, True], (-5, 1000): [False, False, False], (120,): [False, True, False]}
    for keys, want in cases.items():
        assert candidate_files(s, {"id": pa.array(keys, pa.int64())}).to_pylist() == want, keys


def test_missing_statistics_prove_nothing():
    s = stats(**{"min.id": [None, 10, 10], "max.id": [None, None, 20]})
    assert candidate_files(s, {"id": pa.array([5], pa.int64())}).to_pylist() == [True, False, False]
    assert candidate_files(s, {"id": pa.array([30], pa.int64())}).to_pylist() == [True, True, False]


def test_composite_keys_are_tested_column_by_column():
    s = stats(**{"min.a": [0, 0], "max.a": [9, 9], "min.b": ["a", "m"], "max.b": ["l", "z"]})
    got = candidate_files(s, {"a": pa.array([3]), "b": pa.array(["q"])}).to_pylist()
    assert got == [False, True]


def test_touched_counts_files_and_bytes():
    s = stats(**{"min.id": [0, 100], "max.id": [49, 149]})
    t = touched_files(s, {"id": pa.array([120])})
    assert (t.files, t.bytes, t.of_files, t.of_bytes, t.skips_any) == (1, 100, 2, 200, True)


def test_predicates_as_exact_strings():
    assert column_predicate("id", [5]) == "t.`id` IN (5)"
    assert column_predicate("a b", [2, -1]) == "t.`a b` IN (-1, 2)"
    assert column_predicate("k", ["x'y", "z"]) == "t.`k` IN ('x\\'y', 'z')"
    many = list(range(IN_LIST_MAX + 1))
    assert column_predicate("id", many) == f"(t.`id` BETWEEN 0 AND {IN_LIST_MAX})"
    strings = [f"k{i:05d}" for i in range(IN_LIST_MAX + 1)]
    assert column_predicate("k", strings) == f"t.`k` BETWEEN 'k00000' AND 'k{IN_LIST_MAX:05d}'"
    assert column_predicate("k", ["ok", "tab\there"]) is None
    assert literal(3.5) is None and literal(b"x") is None


def test_ranges_cover_every_key():
    rng = np.random.default_rng(3)
    keys = np.unique(np.concatenate([rng.integers(0, 10**9, 3000), rng.integers(5 * 10**9, 5 * 10**9 + 500, 200)]))
    ranges = key_ranges(keys, 64)
    assert len(ranges) <= 64
    assert all(any(lo <= k <= hi for lo, hi in ranges) for k in keys)
    assert ranges[-1][0] >= 5 * 10**9      # the dense group at the top is a range of its own


def test_target_predicate_from_a_positional_source():
    table = TableSchema("t", (Column("v", DataType.STRING), Column("id", DataType.LONG, primary_key=True)))
    source = pa.table({"op": pa.array([0, 0], pa.int8()), "c0": ["a", "b"], "c1": pa.array([7, 3], pa.int64())})
    assert target_predicate(table, ["id"], batch_key_values(source, table, ["id"])) == "t.`id` IN (3, 7)"
    assert target_predicate(table, ["v"], {"v": pa.array(["é"])}) is None
    assert target_predicate(table, ["id"], {"id": pa.array([1, None])}) is None
