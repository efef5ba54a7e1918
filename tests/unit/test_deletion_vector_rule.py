"""When a table gets deletion vectors before an engine rewrites it (core/write_plan.py
deletion_vectors_first, a pure rule of the write's plan): from each dialect's size, on both
engines, never twice."""
from __future__ import annotations

from delta_destination.core.write_plan import DELETION_VECTORS, deletion_vectors_first
from delta_destination.engines.choice import SAIL, SPARK, EngineChoice

MIB = 2**20


def first(engine: str, size, current=None, code="default"):
    return deletion_vectors_first(EngineChoice(engine, "test", True, code), size, dict(current or {}))


def wants(engine: str, size, current=None, code="default") -> bool:
    change = first(engine, size, current, code)
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
    change = first(SAIL, 100 * MIB)
    assert "embedded Sail" in change.why
    change = first(SPARK, 100 * MIB)
    assert "Apache Spark" in change.why


def test_an_unknown_configuration_sets_nothing():
    assert deletion_vectors_first(EngineChoice(SPARK, "test", True), 100 * MIB, None) is None
