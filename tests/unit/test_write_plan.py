"""A keyed write's plan (core/write_plan.py plan_write) from a snapshot, a batch and the engine the
table was opened on: a pure function, so every branch is checked here without an engine. The
engine tests that execute plans are tests/engines/test_skipping_merge.py (files skipped),
test_key_ranges.py (appends), test_auto_engine.py (moves) and test_memory_guard_server.py (refusals)."""
from __future__ import annotations

import pyarrow as pa

from delta_destination.core.delta_log import LogField, TableSnapshot
from delta_destination.core.model import Column, DataType, TableSchema
from delta_destination.core.write_plan import (APPEND, DELETION_VECTORS, HISTORY, MERGE, PROBE, WriteFacts,
                                               plan_write)
from delta_destination.engines.choice import SAIL, SPARK, EngineChoice
from delta_destination.settings import Settings

MIB = 2**20
TABLE = TableSchema("orders", (Column("id", DataType.LONG, primary_key=True), Column("v", DataType.STRING)))
SPARK_CONFIGURED = EngineChoice(SPARK, "engine spark is configured", False, "configured")
SAIL_AUTO = EngineChoice(SAIL, "embedded Sail serves tables within the memory budget", True)


def snapshot(ranges, file_bytes=MIB, configuration=None, version=4) -> TableSnapshot:
    """A table of files with these [min, max] id ranges."""
    adds = pa.table({"size_bytes": [file_bytes] * len(ranges), "num_records": [10] * len(ranges),
                     "min.id": [lo for lo, _ in ranges], "max.id": [hi for _, hi in ranges]})
    return TableSnapshot(version, dict(configuration or {}), {"id": LogField("long", "id"), "v": LogField("string", "v")},
                         adds)


def facts(snap, keys, opened_on=SPARK_CONFIGURED, history=False, spark=True, budget_gb=4.0, source_bytes=1000):
    ids = pa.array(keys, pa.int64())
    source = pa.table({"op": pa.array([0] * len(keys), pa.int8()), "c0": ids, "c1": pa.array(["x"] * len(keys))})
    return WriteFacts("s.orders", TABLE, ("id",), {"id": ids}, source_bytes, snap, opened_on,
                      Settings.create("/wh", memory_budget_gb=budget_gb), spark, history,
                      None if history else source, ("events",))


def test_new_keys_beyond_every_file_are_an_append():
    plan = plan_write(facts(snapshot([(1, 100), (101, 200)]), [500, 501]))
    assert plan.statement == APPEND and plan.target_predicate is None and plan.version == 4


def test_a_merge_on_spark_reads_only_the_files_a_key_can_be_in():
    plan = plan_write(facts(snapshot([(1, 100), (101, 200), (201, 300)]), [150, 160]))
    assert plan.statement == MERGE and plan.engine == SPARK_CONFIGURED and not plan.moves
    assert (plan.touched.files, plan.touched.of_files) == (1, 3)
    assert plan.target_predicate == "t.`id` IN (150, 160)"
    assert "150" not in plan.line() and "1 of 3 files can hold a batch key" in plan.line()


def test_no_predicate_when_every_file_can_hold_a_key():
    plan = plan_write(facts(snapshot([(1, 100), (101, 200)]), [50, 150]))
    assert plan.statement == MERGE and plan.touched.files == 2 and plan.target_predicate is None


def test_an_unreadable_log_still_gets_the_predicate_on_spark():
    plan = plan_write(facts(None, [5]))
    assert plan.statement == MERGE and plan.touched is None and plan.target_predicate == "t.`id` IN (5)"
    assert plan.version is None and plan.properties_first is None   # properties unknown: none set


def test_sail_probes_big_tables_and_gives_no_predicate():
    plan = plan_write(facts(snapshot([(1, 100)], file_bytes=32 * MIB), [50], opened_on=SAIL_AUTO))
    assert plan.statement == PROBE and plan.target_predicate is None and plan.touched is None
    assert plan.memory is not None and not plan.refused
    small = plan_write(facts(snapshot([(1, 100)]), [50], opened_on=SAIL_AUTO))
    assert small.statement == MERGE


def test_a_merge_over_sails_budget_moves_to_spark_with_deletion_vectors():
    plan = plan_write(facts(snapshot([(1, 100), (101, 200), (201, 300), (301, 400)], file_bytes=100 * MIB), [50],
                            opened_on=SAIL_AUTO))
    assert plan.moves and plan.engine.engine == SPARK and plan.engine.code == "merge_over_budget"
    assert not plan.refused and plan.properties_first.properties == {DELETION_VECTORS: "true"}
    assert plan.target_predicate == "t.`id` IN (50)"   # the MERGE's engine skips files


def test_over_the_budget_without_spark_is_refused():
    plan = plan_write(facts(snapshot([(1, 100)] * 4, file_bytes=100 * MIB), [50], opened_on=SAIL_AUTO, spark=False))
    assert plan.refused and not plan.moves


def test_deletion_vectors_once_per_table():
    on = snapshot([(1, 100), (101, 200)], file_bytes=8 * MIB, configuration={DELETION_VECTORS: "true"})
    assert plan_write(facts(on, [50])).properties_first is None
    off = snapshot([(1, 100), (101, 200)], file_bytes=8 * MIB)
    assert plan_write(facts(off, [50])).properties_first is not None


def test_history_batches_merge_with_the_predicate():
    plan = plan_write(facts(snapshot([(1, 100), (101, 200)]), [500], history=True))
    assert plan.statement == HISTORY and plan.target_predicate == "t.`id` IN (500)"
