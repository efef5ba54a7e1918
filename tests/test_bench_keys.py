"""The benchmark's key distributions (scripts/bench_data.py): pure and deterministic, so exact tests."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import bench_data as bd  # noqa: E402


def test_recent_keys_mostly_among_the_newest_tenth(tmp_path):
    g = bd.Generator(tmp_path, seed=42, scale=1.0)
    keys = g.sample_recent("g_recent_1", 50_000, 3_000_000)
    assert len(keys) == 50_000
    assert len(np.unique(keys)) == 50_000  # distinct: every key is one existing row
    assert keys.min() >= 0 and keys.max() < 3_000_000
    newest = keys >= 2_700_000
    assert newest.sum() == 45_000  # exactly 90% among the newest 10%
    assert (~newest).sum() == 5_000


def test_recent_keys_are_deterministic_by_seed(tmp_path):
    a = bd.Generator(tmp_path, seed=42, scale=1.0).sample_recent("x", 1_000, 100_000)
    b = bd.Generator(tmp_path, seed=42, scale=1.0).sample_recent("x", 1_000, 100_000)
    c = bd.Generator(tmp_path, seed=43, scale=1.0).sample_recent("x", 1_000, 100_000)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_recent_keys_on_a_tiny_table_never_repeat(tmp_path):
    # at --scale 0.01 the newest tenth can be smaller than 90% of the sample: the rest come from older keys
    keys = bd.Generator(tmp_path, seed=1, scale=0.01).sample_recent("t", 500, 1_000)
    assert len(np.unique(keys)) == 500
    assert (keys >= 900).sum() == 100
