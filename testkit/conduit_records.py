"""Shared by the Conduit tests: the engine under test (ONE place) and the connector's configuration
for it, records to send, and the state a stream must leave (replaying it the way the destination must
apply it)."""
from __future__ import annotations

import os
from pathlib import Path

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


def numbered_replay(first: int, last: int, keys: int) -> dict:
    """What testkit.conduit_host.numbered_records first..last leave: key k holds the last i."""
    return {(i % keys,): i for i in range(max(first, last - keys + 1), last + 1)}


# ---- a backlog -------------------------------------------------------------------------------------
def backlog_records(total: int, table: str = "backlog"):
    """`total` new keys, ~300 bytes each on the wire, the way a snapshot backlog arrives."""
    from testkit.conduit_host import CREATE, record

    note = "x" * 120
    for i in range(1, total + 1):
        yield record(i, CREATE, key={"id": i}, metadata={"opencdc.collection": table},
                     after={"id": i, "name": f"user{i}", "email": f"user{i}@example.com", "score": i / 7,
                            "active": i % 2 == 0, "note": note})
