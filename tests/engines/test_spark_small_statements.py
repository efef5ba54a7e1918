"""Small statements on Apache Spark get a session of their own (choice.small_statements,
dialect.SparkDialect.small_statement_conf): a small batch into a small table runs without code
generation, anything bigger on the engine's usual session; both write the same table, one commit
per request, and the rows read back with delta-rs are what was sent."""
from __future__ import annotations

import logging

import pyarrow as pa
import pytest

from testkit.delta_read import delta_version, read_delta_table, recent_operations
from delta_destination.core.api import DeltaCore
from delta_destination.core.changes import ChangeSet, Changes, Op
from delta_destination.core.model import Column, DataType as T, TableSchema
from delta_destination.engines.choice import SMALL_BATCH_BYTES, SMALL_TABLE_BYTES, small_statements
from delta_destination.engines.pool import EnginePool
from delta_destination.engines.router import EngineRouter
from delta_destination.settings import Settings

ITEMS = TableSchema("items", (Column("id", T.LONG, primary_key=True), Column("name", T.STRING)))


def test_the_rule_needs_both_sizes_small_and_spark():
    size = lambda n: lambda: n  # noqa: E731
    assert small_statements("spark", 10_000, size(50_000))
    assert small_statements("spark", SMALL_BATCH_BYTES, size(SMALL_TABLE_BYTES))
    assert not small_statements("spark", SMALL_BATCH_BYTES + 1, size(0))
    assert not small_statements("spark", 0, size(SMALL_TABLE_BYTES + 1))
    assert not small_statements("spark", None, size(0)) and not small_statements("spark", 0, size(None))
    assert not small_statements("sail", 10, size(10))


def test_the_table_is_measured_only_for_a_small_batch_on_spark():
    def never():
        raise AssertionError("measured")
    assert not small_statements("spark", SMALL_BATCH_BYTES + 1, never)
    assert not small_statements("sail", 10, never)
    assert not small_statements("spark", None, never)


@pytest.fixture(scope="module")
def spark_engines(shared_spark):
    pool = EnginePool()
    yield pool
    pool.stop()


def upserts(ids, name: str, pad: int = 0) -> ChangeSet:
    cs = ChangeSet()
    cs.add(Changes(Op.UPSERT, pa.table({"id": pa.array(ids, pa.int64()),
                                        "name": [f"{name}{i}" + "x" * pad for i in ids]}), source="test"))
    return cs


def write_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("WriteBatch s.items")]


def test_a_small_batch_runs_on_the_small_session_and_a_big_one_does_not(tmp_path, shared_spark, spark_engines, caplog):
    core = DeltaCore(EngineRouter(spark_engines), door="test")
    settings = Settings.create(str(tmp_path / "wh"), engine="spark", spark_remote=shared_spark.url)
    core.tables.create(settings, "s", ITEMS)
    path = core.location(settings, "s", "items")
    with caplog.at_level(logging.INFO, logger="delta_destination"):
        core.writer.write(settings, "s", "items", lambda t: upserts(list(range(2000)), "a"))
        core.writer.write(settings, "s", "items", lambda t: upserts(list(range(1950, 2075)), "b"))
    lines = write_lines(caplog)
    assert len(lines) == 2 and all("; small statements)" in line for line in lines), lines
    small = [s for s in spark_engines.sessions_of("spark")
             if s.spark.conf.get("spark.sql.codegen.factoryMode", "FALLBACK") == "NO_CODEGEN"]
    assert len(small) == 1
    got = {r["id"]: r["name"] for r in read_delta_table(path).to_pylist()}
    assert len(got) == 2075 and got[5] == "a5" and got[1949] == "a1949" and got[1950] == "b1950" and got[2074] == "b2074"

    # a batch over SMALL_BATCH_BYTES: the usual session (code generation), same table
    big_ids = list(range(1000, 1000 + 3000))
    assert upserts(big_ids, "c", pad=400).nbytes > SMALL_BATCH_BYTES
    v = delta_version(path)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="delta_destination"):
        core.writer.write(settings, "s", "items", lambda t: upserts(big_ids, "c", pad=400))
    lines = write_lines(caplog)
    assert len(lines) == 1 and "small statements" not in lines[0], lines
    assert delta_version(path) == v + 1 and recent_operations(path, 1) == ["MERGE"]
    assert len(spark_engines.sessions_of("spark")) == 2

    got = {r["id"]: r["name"] for r in read_delta_table(path).to_pylist()}
    assert len(got) == 4000
    assert got[5] == "a5" and got[1949] == "c1949" + "x" * 400 and got[2074] == "c2074" + "x" * 400
    assert got[900] == "a900" and got[3999] == "c3999" + "x" * 400
