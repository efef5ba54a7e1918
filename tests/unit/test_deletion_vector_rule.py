"""When a table gets deletion vectors before an engine rewrites it (engines/router.py
EngineLease.rewrite_properties): from each dialect's size, on both engines, never twice. A lease
here holds a session object that only names its dialect: the rule asks nothing of an engine."""
from __future__ import annotations

from types import SimpleNamespace

from delta_destination.engines.choice import SAIL, SPARK, EngineChoice
from delta_destination.engines.dialect import SailDialect, SparkDialect
from delta_destination.engines.router import DELETION_VECTORS, EngineLease
from delta_destination.settings import Settings

MIB = 2**20


def lease(engine: str, code: str = "default") -> EngineLease:
    dialect = SailDialect() if engine == SAIL else SparkDialect()
    session = SimpleNamespace(dialect=dialect, name=engine)
    settings = Settings.create("/wh")
    return EngineLease(session, settings, EngineChoice(engine, "test", True, code), router=None, request=settings)


def wants(engine: str, size, current=None, code="default") -> bool:
    change = lease(engine, code).rewrite_properties(lambda: dict(current or {}), lambda: size)
    return change is not None and change.properties == {DELETION_VECTORS: "true"}


def test_each_engine_from_its_own_size():
    assert not wants(SAIL, 63 * MIB) and wants(SAIL, 64 * MIB)
    assert not wants(SPARK, 7 * MIB) and wants(SPARK, 8 * MIB)


def test_unknown_sizes_and_tables_that_have_them():
    assert not wants(SAIL, None)          # Sail: only when the log shows the size
    assert wants(SPARK, None)             # Spark: as before (warehouses only the remote engine reaches)
    assert not wants(SAIL, 100 * MIB, {DELETION_VECTORS: "true"})
    assert not wants(SPARK, 100 * MIB, {DELETION_VECTORS: "TRUE"})


def test_a_table_moved_to_spark_for_its_size_gets_them_whatever_its_size():
    assert wants(SPARK, 1 * MIB, code="merge_over_budget")


def test_the_reason_names_the_engine():
    change = lease(SAIL).rewrite_properties(lambda: {}, lambda: 100 * MIB)
    assert "embedded Sail" in change.why
    change = lease(SPARK).rewrite_properties(lambda: {}, lambda: 100 * MIB)
    assert "Apache Spark" in change.why
