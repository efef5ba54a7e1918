"""The benchmark's key distributions (testkit/bench_keys.py): pure and deterministic, so exact tests."""
from __future__ import annotations

import numpy as np

from testkit import bench_keys as bk


def test_recent_keys_mostly_among_the_newest_tenth():
    keys = bk.sample_recent(42, "g_recent_1", 50_000, 3_000_000)
    assert len(keys) == 50_000
    assert len(np.unique(keys)) == 50_000  # distinct: every key is one existing row
    assert keys.min() >= 0 and keys.max() < 3_000_000
    newest = keys >= 2_700_000
    assert newest.sum() == 45_000  # exactly 90% among the newest 10%
    assert (~newest).sum() == 5_000


def test_recent_keys_are_deterministic_by_seed():
    a = bk.sample_recent(42, "x", 1_000, 100_000)
    b = bk.sample_recent(42, "x", 1_000, 100_000)
    c = bk.sample_recent(43, "x", 1_000, 100_000)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_recent_keys_on_a_tiny_table_never_repeat():
    # at --scale 0.01 the newest tenth can be smaller than 90% of the sample: the rest come from older keys
    keys = bk.sample_recent(1, "t", 500, 1_000)
    assert len(np.unique(keys)) == 500
    assert (keys >= 900).sum() == 100


def test_uniform_keys_are_distinct_sorted_and_named():
    a = bk.sample_uniform(42, "upsert", 1_000, 10_000)
    assert len(np.unique(a)) == 1_000 and np.array_equal(a, np.sort(a))
    assert a.min() >= 0 and a.max() < 10_000
    assert not np.array_equal(a, bk.sample_uniform(42, "update", 1_000, 10_000))  # each draw its own stream


def test_shuffled_is_a_deterministic_permutation():
    keys = np.arange(1_000, dtype=np.int64)
    s = bk.shuffled(42, "upsert", keys)
    assert np.array_equal(np.sort(s), keys) and not np.array_equal(s, keys)
    assert np.array_equal(s, bk.shuffled(42, "upsert", keys))
