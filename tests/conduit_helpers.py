"""Shared by the Conduit tests: the engine under test (ONE place), replaying a stream the way
the destination must apply it, and reading the Delta table back with delta-rs."""
from __future__ import annotations

import os
from pathlib import Path

from testkit.delta_read import read_delta_table

# The lead parametrizes across engines with DELTA_TEST_ENGINES (comma list); the first one is used here.
ENGINE = (os.environ.get("DELTA_TEST_ENGINES", "sail").split(",")[0].strip() or "sail")


def connector_config(warehouse: Path, **extra) -> dict:
    cfg = {"warehouse": str(warehouse), "engine": ENGINE}
    if os.environ.get("DELTA_TEST_SPARK_REMOTE"):
        cfg["spark.remote"] = os.environ["DELTA_TEST_SPARK_REMOTE"]
    cfg.update({k: str(v) for k, v in extra.items()})
    return cfg


def replay(events) -> dict:
    """events: (op, key_tuple, row or None) in stream order -> {key: row}. Upserts replace the
    named fields (others keep their value), deletes remove the key."""
    state: dict = {}
    for op, key, row in events:
        if op == "delete":
            state.pop(key, None)
        else:
            state[key] = {**state.get(key, {}), **row}
    return state


def table_rows(path: Path, key_columns) -> dict:
    t = read_delta_table(str(path))
    out = {}
    for row in t.to_pylist():
        out[tuple(row[k] for k in key_columns)] = row
    return out
