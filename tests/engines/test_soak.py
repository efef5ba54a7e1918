"""A short soak (a few hundred small commits on one server started as `make run` starts it): the
engine process's memory stays within its bound whatever the number of commits, and nothing fails.
The long soak with its figures is `make bench-soak` (bench/soak/run.py, docs/benchmarks.md)."""
from __future__ import annotations

import pytest

from bench.common.process_memory import MIB
from bench.common.small_batches import Shape
from bench.soak.run import FivetranSoak

BOUND_MIB = 320
# A replacement overlaps the old process (finishing its last requests) with the new one (~150 MiB
# when it starts serving), and a process may pass its bound by what one request adds before the
# check at the end of that request.
FRESH_ENGINE_MIB, ONE_REQUEST_MIB = 200, 64


@pytest.mark.slow
def test_a_short_soak_keeps_the_engine_within_its_bound(tmp_path):
    soak = FivetranSoak(tmp_path, tables=6, rounds=60, in_flight=4, shape=Shape(initial_rows=500),
                        env={"DELTA_DESTINATION_ENGINE_MAX_MEMORY_MB": str(BOUND_MIB)}, sample_seconds=1.0)
    r = soak.run()
    assert r["failed_requests"] == 0, r["failures"]
    assert r["tables_equal_to_model"], r["problems"]
    assert r["engine_restarts"].get("memory", 0) >= 1, r["engine_restarts"]   # the bound was reached, and held
    series = r["memory"]["series"]                                             # [s, done, tree, door, engine] MiB
    engine_peak = max(s[4] for s in series)
    assert engine_peak <= BOUND_MIB + FRESH_ENGINE_MIB + ONE_REQUEST_MIB, (engine_peak, series)
    # The door process itself keeps nothing per commit: its last samples are where its first were.
    door = [s[3] for s in series if s[1] > 0]
    assert max(door[-5:]) <= min(door[:5]) * 1.10 + 16, door
    print(f"short soak: {r['write_batches']} commits, engine peak {engine_peak:.0f} MiB (bound {BOUND_MIB}), "
          f"restarts {r['engine_restarts']}, door {door[0]:.0f} -> {door[-1]:.0f} MiB")
