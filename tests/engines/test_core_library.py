"""The core as a library: DeltaCore driven in-process on embedded Sail, no gRPC, no door.

Each test builds change sets the way a door does, calls the core, and reads the Delta
table back with delta-rs (the independent reader). One embedded engine serves the module.
"""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from delta_destination.core.api import DeltaCore
from delta_destination.core.changes import Changes, Op
from delta_destination.core.migrations import (SUCCESS, AddColumnWithDefaultValue, CopyTable, MigrationDetails,
                                               RenameColumn, RenameTable)
from delta_destination.core.model import Column, DataType as T, TableSchema
from delta_destination.engines.pool import EnginePool
from delta_destination.errors import RequesterGone, SchemaMismatch, TableNotFound
from delta_destination.settings import Settings
from testkit.core_changes import changes, order as base_order, rows_by_id, typed
from testkit.delta_read import delta_version

UTC = dt.timezone.utc
ORDERS = TableSchema("orders", (
    Column("id", T.LONG, primary_key=True),
    Column("name", T.STRING),
    Column("amount", T.DECIMAL, precision=12, scale=2),
    Column("at", T.UTC_DATETIME),
    Column("doc", T.JSON),
))


@pytest.fixture(scope="module")
def engines():
    e = EnginePool()
    yield e
    e.stop()


@pytest.fixture
def settings(tmp_path):
    """`column_changes` = `rewrite`: this module's core runs on embedded Sail; under `in_place` auto
    would start a local Spark JVM for its widening and its rename (tests/engines/test_column_mapping_upgrade.py)."""
    return Settings.create(str(tmp_path / "wh"), column_changes="rewrite")




def order(i: int, name: str = "n", amount: str = "1.50") -> dict:
    return base_order(i, name, amount, doc='{"k": 1}')


def rows(settings: Settings, core: DeltaCore, table: str = "orders", schema: str = "s") -> dict:
    return rows_by_id(core.location(settings, schema, table))


def test_create_describe_and_replay(core, settings):
    core.tables.create(settings, "s", ORDERS)
    assert core.describe(settings, "s", "orders") == ORDERS   # exact types (JSON, DECIMAL params) and the key
    core.tables.create(settings, "s", ORDERS)                   # a replay with the same columns is fine
    assert delta_version(core.location(settings, "s", "orders")) == 0
    assert core.describe(settings, "s", "missing") is None


def test_upserts_partial_updates_and_deletes_are_one_commit_each(core, settings):
    core.tables.create(settings, "s", ORDERS)
    location = core.location(settings, "s", "orders")
    core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, [order(i) for i in (1, 2, 3)]))))
    assert delta_version(location) == 1
    update = typed(ORDERS, [{"id": 1, "name": "renamed", "amount": None}], ["id", "name", "amount"])
    keep = pa.table({"name": [False], "amount": [True]})   # amount: Fivetran's unmodified marker
    core.writer.write(settings, "s", "orders", lambda t: changes(
        Changes(Op.UPSERT, typed(t, [order(4)])),
        Changes(Op.UPDATE, update, keep),
        Changes(Op.DELETE, typed(t, [{"id": 2}], ["id"]))))
    assert delta_version(location) == 2
    got = rows(settings, core)
    assert sorted(got) == [1, 3, 4]
    assert got[1]["name"] == "renamed" and got[1]["amount"] == Decimal("1.50")


def test_a_guard_that_refuses_leaves_the_table_as_it_was(core, settings):
    core.tables.create(settings, "s", ORDERS)
    location = core.location(settings, "s", "orders")

    def gone():
        raise RequesterGone("the host is gone")

    with pytest.raises(RequesterGone):
        core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, [order(1)]))), guard=gone)
    assert delta_version(location) == 0 and rows(settings, core) == {}


def test_bad_change_sets_are_refused_before_any_commit(core, settings):
    core.tables.create(settings, "s", ORDERS)
    dup = typed(ORDERS, [order(1), order(1)])
    with pytest.raises(SchemaMismatch, match="same primary key"):
        core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, dup)))
    with pytest.raises(TableNotFound):
        core.writer.write(settings, "s", "nope", lambda t: changes())
    assert delta_version(core.location(settings, "s", "orders")) == 0


def test_alter_changes_a_type_in_one_rewrite_and_truncate(core, settings):
    core.tables.create(settings, "s", ORDERS)
    core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, [order(1), order(2)]))))
    wider = ORDERS.with_columns([c.with_(precision=20) if c.name == "amount" else c for c in ORDERS.columns]
                                + [Column("note", T.STRING)])
    core.tables.alter(settings, "s", wider, drop_columns=False)
    assert core.describe(settings, "s", "orders") == wider
    assert rows(settings, core)[1]["amount"] == Decimal("1.50")
    assert core.tables.truncate(settings, "s", "orders", "at", dt.datetime(2030, 1, 1, tzinfo=UTC), None)
    assert rows(settings, core) == {}


def test_migrations_rename_add_copy_and_rename_table(core, settings):
    core.tables.create(settings, "s", ORDERS)
    core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, [order(1)]))))
    assert core.migrate(settings, MigrationDetails("s", "orders", RenameColumn("name", "title"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "orders", AddColumnWithDefaultValue("qty", T.INT, "7"))) == SUCCESS
    got = rows(settings, core)[1]
    assert got["title"] == "n1" and got["qty"] == 7 and "name" not in got
    assert core.migrate(settings, MigrationDetails("s", "orders", CopyTable("orders", "orders_copy"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "orders", CopyTable("orders", "orders_copy"))) == SUCCESS  # replay
    assert rows(settings, core, "orders_copy")[1]["qty"] == 7
    assert core.migrate(settings, MigrationDetails("s", "orders_copy", RenameTable("orders_copy", "renamed"))) == SUCCESS
    assert core.describe(settings, "s", "orders_copy") is None
    assert core.table_names(settings, "s") == ["orders", "renamed"]
    core.drop_table(settings, "s", "renamed")
    assert core.table_names(settings, "s") == ["orders"]


def test_probe_leaves_nothing_behind(core, settings, tmp_path):
    assert core.probe(settings) is None
    assert [p.name for p in (tmp_path / "wh").iterdir()] == []


def test_the_commit_guard_runs_before_every_attempt_also_the_retries():
    """A commit that loses a race is retried; a newer writer may have won it, so the door's guard
    is asked again before each attempt (here the second attempt is refused, nothing runs again)."""
    from delta_destination.engines.dialect import SailDialect
    from delta_destination.engines.session import EngineSession

    class Conflicting:   # stands in for a Spark Connect session whose first commit loses a race
        statements = 0

        def sql(self, text):
            Conflicting.statements += 1
            raise RuntimeError("Failed to commit transaction: version already exists")

    asked = []

    def guard():
        asked.append(1)
        if len(asked) > 1:
            raise RequesterGone("a newer writer took the table over")

    with pytest.raises(RequesterGone):
        EngineSession(Conflicting(), SailDialect()).execute("merge into s.t", "MERGE ...", before_each=guard)
    assert len(asked) == 2 and Conflicting.statements == 1
