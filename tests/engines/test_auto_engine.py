"""Engine `auto` (engines/choice.py): embedded Sail unless Sail cannot serve a request, then the
local Apache Spark engine, started on first need and stopped when idle.

The rules are unit-tested without an engine. The acceptance tests push a table past a small
memory budget: through a real server started as `make run` starts it (no engine flag) with real
encrypted batch files, and in-process through the core for the move of a request that was
opened on Sail; the tables are read back with delta-rs, and written again by each engine.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import signal
import time

import pytest

from testkit.server_process import served
from testkit.fivetran_requests import batch_file, col, table, write_request
from testkit.delta_read import delta_properties, delta_version, last_operation, read_delta_table, recent_operations
from testkit.processes import running, spark_jvms_below
from delta_destination.core.api import DeltaCore
from delta_destination.core.registry import TableRef, read_table_snapshot
from delta_destination.core.changes import ChangeSet, Changes, Op
from delta_destination.core.memory import table_size
from delta_destination.core.model import Column, DataType as T, TableSchema
from delta_destination.engines.choice import (EngineChoice, base_choice, merge_choice, merge_estimate,
                                              should_prestart, spark_available, upkeep_choice)
from delta_destination.engines.pool import EnginePool
from delta_destination.engines.router import EngineRouter
from delta_destination.errors import InvalidRequest
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.settings import MEMORY_BUDGET_ENV, Settings
from delta_destination.warehouse import Warehouse

GiB, MiB = 2**30, 2**20
UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


# ---- the rules (no engine) ------------------------------------------------------------------

def test_auto_is_the_default_engine_and_sail_and_spark_keep_their_meaning(tmp_path):
    assert Settings.create(str(tmp_path)).engine == "auto"
    for name in ("sail", "spark"):
        c = base_choice(Settings.create(str(tmp_path), engine=name), True)
        assert (c.engine, c.auto) == (name, False)
    # A remote Spark Connect server is auto's Apache Spark; `engine spark` with it means everything remote.
    remote = Settings.create(str(tmp_path), spark_remote="sc://h:15002")
    assert remote.engine == "auto" and remote.engine_label.startswith("auto (embedded Sail; the Apache Spark server")
    sail = base_choice(remote, True)
    assert sail.engine == "sail" and sail.settings(remote).spark_remote is None     # auto's Sail is its own
    assert upkeep_choice(remote, spark_available(remote)).settings(remote).spark_remote == "sc://h:15002"
    everything = base_choice(Settings.create(str(tmp_path), engine="spark", spark_remote="sc://h:15002"), False)
    assert (everything.engine, everything.auto) == ("spark", False)
    # A warehouse only the remote reaches (a platform's own storage): every request on the remote.
    platform = base_choice(Settings.create("dbfs:/mnt/lake", spark_remote="sc://h:15002"), True)
    assert platform.engine == "spark" and "cannot reach the warehouse dbfs:/mnt/lake" in platform.reason


def test_auto_serves_on_sail_unless_sail_cannot(tmp_path):
    s = Settings.create(str(tmp_path / "wh"))
    assert base_choice(s, True) == EngineChoice("sail", "embedded Sail serves tables within the memory budget", True)
    assert base_choice(s, False).engine == "sail"          # no JVM here (the binary, the image)
    assert upkeep_choice(s, True).engine == "spark"        # Sail cannot compact or vacuum
    assert upkeep_choice(s, False).engine == "sail"        # ... and says so per step
    # With a metastore the writes stay on Sail; only registering a table needs Spark (the router's catalog lease).
    catalog = Settings.create(str(tmp_path / "wh"), catalog_uri="thrift://127.0.0.1:9083")
    assert base_choice(catalog, True).engine == "sail" and base_choice(catalog, True).settings(catalog).catalog_uri is None
    unsafe = Settings.create(str(tmp_path / "my lake"))
    assert base_choice(unsafe, True).engine == "spark" and "cannot address" in base_choice(unsafe, True).reason


def test_a_merge_moves_to_spark_past_the_budget_and_spark_starts_ahead_near_it():
    base, budget = EngineChoice("sail", "default", True), 4 * GiB
    limit = (budget - merge_estimate(0)) // 17      # the target bytes at which Sail's estimate meets the budget
    assert merge_choice(base, True, limit, 0, budget) == base
    moved = merge_choice(base, True, limit + 1, 0, budget)
    assert moved.engine == "spark" and moved.auto and "over the memory budget of 4.0 GB" in moved.reason
    assert merge_choice(base, True, limit - MiB, 5 * MiB, budget).engine == "spark"   # the batch counts too
    assert merge_choice(base, True, None, 0, budget) == base                      # not measured: no move
    fixed = EngineChoice("sail", "engine sail is configured", False)
    assert merge_choice(fixed, True, limit + 1, 0, budget) == fixed               # the guard refuses instead
    assert not should_prestart(base, True, limit // 2, budget)
    assert should_prestart(base, True, int(limit * 0.9), budget)
    assert not should_prestart(base, False, int(limit * 0.9), budget)


# ---- a real server started without an engine flag ------------------------------------------

WIDE = table("growing", col("id", "LONG", pk=True), col("v", "STRING"),
             col("_fivetran_synced", "UTC_DATETIME"), col("_fivetran_deleted", "BOOLEAN"))


def rows(ids, v):
    return [{"id": i, "v": v(i) if callable(v) else f"{v}{i}", "_fivetran_synced": T0, "_fivetran_deleted": False}
            for i in ids]


def spark_children(pid: int) -> list[int]:
    """PIDs of the Spark Connect JVMs the server at `pid` started."""
    return [p.pid for p in spark_jvms_below(pid)]


@pytest.mark.smoke  # `make test` runs it: the default engine's promise that no table is refused
def test_default_engine_moves_a_table_past_the_budget_to_spark_and_both_engines_keep_writing_it(
        tmp_path, dedicated_server):
    """Budget 0.52 GB: Sail's MERGE estimate (0.5 GB + 17x the table's Parquet) passes it once the
    table holds about 1.2 MiB of Parquet. Small writes stay on Sail; the upsert after the table grew
    is served by a local Spark engine the server starts then; a request naming Sail writes the same
    table afterwards, and auto goes on serving it on Spark. kill -9 of the server takes the JVM."""
    srv = dedicated_server(tmp_path / "wh", tmp_path / "server.log", env={MEMORY_BUDGET_ENV: "0.52"})
    stub, path, log = srv.stub, f"{srv.warehouse}/s/growing", tmp_path / "server.log"
    assert stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=WIDE)).success
    assert stub.WriteBatch(write_request("s", WIDE, replace=[batch_file(tmp_path, WIDE, rows(range(100), "a"))])).success
    assert stub.WriteBatch(write_request("s", WIDE, replace=[batch_file(tmp_path, WIDE, rows(range(50, 150), "b"))])).success
    assert spark_children(srv.proc.pid) == []                # Sail served both: no JVM yet
    rng = secrets.SystemRandom()
    grow = rows(range(1000, 81000), lambda i: "%032x" % rng.getrandbits(128))   # ~2.5 MiB of Parquet
    assert stub.WriteBatch(write_request("s", WIDE, replace=[batch_file(tmp_path, WIDE, grow)])).success
    ref = TableRef("s", "growing", path, Warehouse(str(srv.warehouse)))
    assert merge_estimate(table_size(read_table_snapshot(ref)).bytes) > 0.52 * GiB
    v0 = delta_version(path)
    assert "delta.enableDeletionVectors" not in delta_properties(path)   # Sail created it: plain Delta
    assert stub.WriteBatch(write_request("s", WIDE, replace=[batch_file(tmp_path, WIDE, rows(range(10), "c"))])).success
    # Spark's first MERGE into it: deletion vectors turned on (metadata only), then one commit of the rows.
    assert delta_version(path) == v0 + 2 and recent_operations(path, 2) == ["SET TBLPROPERTIES", "MERGE"]
    assert delta_properties(path)["delta.enableDeletionVectors"] == "true"
    assert "turning deletion vectors on before its first rewrite on Apache Spark" in log.read_text()
    jvms = spark_children(srv.proc.pid)
    assert len(jvms) == 1
    engines = served(log, "growing")
    assert len(engines) == 4 and all(e.startswith("engine sail") for e in engines[:3]), engines
    assert engines[3].startswith("engine spark (the MERGE into") and "over the memory budget of 0.5 GB" in engines[3]
    got = {r["id"]: r["v"] for r in read_delta_table(path).to_pylist()}
    assert len(got) == 80150 and got[5] == "c5" and got[60] == "b60" and got[120] == "b120"

    # Sail, named by a request (and a budget it fits), writes the table Spark wrote; then auto again.
    req = write_request("s", WIDE, replace=[batch_file(tmp_path, WIDE, rows(range(5, 15), "d"))])
    req.configuration.update({"engine": "sail", "memory_budget_gb": "64"})
    assert stub.WriteBatch(req).success
    assert stub.WriteBatch(write_request("s", WIDE, replace=[batch_file(tmp_path, WIDE, rows([0, 1, 99999], "e"))])).success
    engines = served(log, "growing")
    assert engines[4] == "engine sail (engine sail is configured)" and engines[5].startswith("engine spark"), engines
    assert last_operation(path) == "MERGE" and log.read_text().count("turning deletion vectors on") == 1  # once
    got = {r["id"]: r["v"] for r in read_delta_table(path).to_pylist()}
    assert len(got) == 80151 and (got[0], got[4], got[5], got[14], got[15], got[99999]) == \
        ("e0", "c4", "d5", "d14", "a15", "e99999")

    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(10)
    deadline = time.monotonic() + 30
    while running(jvms[0]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not running(jvms[0]), "the on-demand Spark JVM outlived the destination"
    assert read_delta_table(path).num_rows == 80151


# ---- in-process: a request opened on Sail moves to Spark; idle stop ---------------------------

ITEMS = TableSchema("items", (Column("id", T.LONG, primary_key=True), Column("name", T.STRING)))


@pytest.fixture(scope="module")
def auto_engines():
    """Engines as the server makes them (auto), shared by the module: the local Spark JVM auto
    starts on demand is started once."""
    e = EnginePool(idle_minutes=0)
    yield e
    e.stop()


def upserts(ids, name):
    import pyarrow as pa

    cs = ChangeSet()
    cs.add(Changes(Op.UPSERT, pa.table({"id": pa.array(ids, pa.int64()), "name": [f"{name}{i}" for i in ids]}),
                   source="test"))
    return cs


def test_a_merge_opened_on_sail_moves_to_spark_when_the_batch_passes_the_budget(tmp_path, auto_engines, caplog):
    """The budget lies between Sail's estimate for the table alone and for the table plus the batch:
    the request opens on Sail and its MERGE moves to Spark before anything is written; one commit."""
    core = DeltaCore(EngineRouter(auto_engines), door="test")
    settings = Settings.create(str(tmp_path / "wh"))
    core.tables.create(settings, "s", ITEMS)
    core.writer.write(settings, "s", "items", lambda t: upserts(list(range(1000)), "a"))
    path = core.location(settings, "s", "items")
    ref = TableRef("s", "items", path, Warehouse(settings.warehouse))
    tight = Settings.create(settings.warehouse, memory_budget_gb=(merge_estimate(table_size(read_table_snapshot(ref)).bytes) + 1) / GiB)
    v0 = delta_version(path)
    with caplog.at_level(logging.INFO, logger="delta_destination"):
        result = core.writer.write(tight, "s", "items", lambda t: upserts(list(range(990, 1010)), "b"))
    # the rows in one commit, after the metadata-only commit that turns deletion vectors on
    assert result.committed and delta_version(path) == v0 + 2
    assert recent_operations(path, 2) == ["SET TBLPROPERTIES", "MERGE"]
    assert any("moving the request to Apache Spark" in r.getMessage() for r in caplog.records)
    assert any(r.getMessage().startswith("WriteBatch s.items") and ", engine spark (the MERGE into" in r.getMessage()
               for r in caplog.records)
    got = {r["id"]: r["name"] for r in read_delta_table(path).to_pylist()}
    assert len(got) == 1010 and got[5] == "a5" and got[995] == "b995" and got[1009] == "b1009"
    assert auto_engines.local_spark_pids()
    with core.upkeep.registry.session(settings, upkeep=True) as upkeep_engine:
        assert upkeep_engine.name == "spark"                # upkeep goes to the same engine


def test_a_column_spark_adds_under_auto_is_written_by_sail_afterwards(tmp_path, auto_engines):
    """A table too big for Sail (a budget under Sail's base estimate) is altered on Spark by auto; the
    next write, which Sail serves (a large budget), carries the new column into the same table."""
    core = DeltaCore(EngineRouter(auto_engines), door="test")
    settings = Settings.create(str(tmp_path / "wh"), memory_budget_gb=64)
    core.tables.create(settings, "s", ITEMS)
    core.writer.write(settings, "s", "items", lambda t: upserts([1, 2, 3], "a"))   # Sail registers the table
    tight = Settings.create(settings.warehouse, memory_budget_gb=0.4)             # under Sail's 0.5 GB base
    wider = TableSchema("items", ITEMS.columns + (Column("note", T.STRING),))
    core.tables.alter(tight, "s", wider, drop_columns=False)                       # on Spark
    import pyarrow as pa

    cs = ChangeSet()
    cs.add(Changes(Op.UPSERT, pa.table({"id": pa.array([2, 4], pa.int64()), "name": ["b2", "b4"],
                                        "note": ["n2", "n4"]}), source="test"))
    core.writer.write(settings, "s", "items", lambda t: cs)                         # on Sail again
    got = {r["id"]: (r["name"], r["note"]) for r in read_delta_table(core.location(settings, "s", "items")).to_pylist()}
    assert got == {1: ("a1", None), 2: ("b2", "n2"), 3: ("a3", None), 4: ("b4", "n4")}


def test_an_idle_on_demand_spark_engine_is_stopped_but_never_under_a_request(tmp_path, auto_engines):
    spark = Settings.create(str(tmp_path / "wh"), engine="spark")
    with auto_engines.lease(spark, on_demand=True):    # started as auto would (when not running yet)
        pass
    (pid,) = auto_engines.local_spark_pids()
    auto_engines.idle_seconds = 0.01
    with auto_engines.lease(spark, on_demand=True):    # a request is running on it
        time.sleep(0.05)
        assert auto_engines.stop_idle() == [] and running(pid)
    time.sleep(0.05)
    assert auto_engines.stop_idle() == [pid]
    assert not running(pid) and auto_engines.local_spark_pids() == []
