"""A table created by one engine and written by the other, on the public tester inputs.

Two servers share one warehouse: the first (one engine) creates the tables and applies the
first half of the operations, the second (the other engine) applies the rest, the
migrations and the describes; the reference model and delta-rs check the result. Spark
creates tables with deletion vectors and column mapping, which Sail 0.7.2 reads and writes
(measured: its MERGE keeps rows removed by a vector removed, and it writes physical column
names); a table Sail created is a plain Delta table to Spark.
"""
from __future__ import annotations

import hashlib

import pytest

from testkit import tester as tc
from testkit.server_process import TESTER_INPUTS, RunningServer

# (input, history variant?): the ddl/dml files have no history-mode table, so their live run is the only one.
CASES = [("input.json", False), ("input.json", True), ("schema_migrations_input_sync_modes.json", False),
         ("schema_migrations_input_sync_modes.json", True), ("schema_migrations_input_ddl.json", True),
         ("schema_migrations_input_dml.json", True)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    base = tmp_path_factory.mktemp("cross")
    servers = {e: RunningServer(base / "warehouse", base / f"{e}.log", engine=e) for e in ("sail", "spark")}
    yield servers
    for s in servers.values():
        s.stop()


@pytest.mark.parametrize("direction", ["sail>spark", "spark>sail"])
@pytest.mark.parametrize("rel,live_only", CASES, ids=[f"{r}-{'live' if lo else 'history'}" for r, lo in CASES])
def test_tables_move_between_engines(pair, rel, live_only, direction):
    first, second = direction.split(">")
    spec = tc.load_input(TESTER_INPUTS / rel)
    half = len(spec.get("ops") or []) // 2
    schema = f"x_{first}_{'h' if not live_only else 'l'}_{hashlib.sha1(rel.encode()).hexdigest()[:8]}"
    log = []
    result = tc.run_spec(pair[first].stub, pair[first].warehouse, spec, schema, live_only=live_only,
                         run_migrations=rel.startswith("schema_migrations_"), log=log.append,
                         handover=(half, pair[second].stub))
    assert result.ok, "\n".join(result.problems + log[-30:])
