"""The warehouse on Azure Storage, against a real Azure Storage API server (Azurite,
delta_destination/tools/azure_server.py) on the embedded Sail engine: the core driven in-process
(as tests/engines/test_object_storage.py does on S3), tables read back by delta-rs, and the
container listed afterwards: nothing may remain outside the tables (no staged batch, probe, trash,
half-written copy or marker blob).

Azurite serves Blob, not ADLS Gen2's DFS endpoint; Sail and delta-rs reach `abfss://` URLs through
object_store, which speaks Blob anyway. Settings are given explicitly (the azure_* fields, in emulator
mode) and this process's environment has no AZURE_* variable: they reach Sail through a process of
its own. The account key is random per server, so the logs can be searched for it.
"""
from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest

from delta_destination.core.api import DeltaCore
from delta_destination.core.changes import ChangeSet, Changes, Op
from delta_destination.core.migrations import (SUCCESS, AddColumnWithDefaultValue, CopyTable, CopyTableToHistoryMode,
                                               DropTable, MigrationDetails, RenameColumn, RenameTable)
from delta_destination.core.model import Column, DataType as T, TableSchema
from delta_destination.core.types import arrow_type
from delta_destination.engines import session as engine_session, shipping
from delta_destination.engines.pool import EnginePool
from delta_destination.engines.router import EngineRouter
from delta_destination.settings import Settings
from delta_destination.warehouse import PROBE_PREFIX, STAGING_DIR, TRASH_DIR
from testkit.delta_read import delta_version, read_delta_table

UTC = dt.timezone.utc
ORDERS = TableSchema("orders", (
    Column("id", T.LONG, primary_key=True),
    Column("name", T.STRING),
    Column("amount", T.DECIMAL, precision=12, scale=2),
    Column("at", T.UTC_DATETIME),
))


@pytest.fixture(scope="module")
def engines(azure_server):
    e = EnginePool()
    yield e
    e.stop()


@pytest.fixture
def settings(azure_server):
    """A fresh prefix of the container per test, reached with explicit settings (emulator mode)."""
    return Settings.create(azure_server.url(f"az-{uuid.uuid4().hex[:8]}/wh"), engine="sail", **azure_server.settings())


@pytest.fixture
def core(engines):
    return DeltaCore(EngineRouter(engines), door="test")


def typed(table: TableSchema, rows: list[dict], columns=None) -> pa.Table:
    cols = [c for c in table.columns if columns is None or c.name in columns]
    return pa.table({c.name: pa.array([r.get(c.name) for r in rows], arrow_type(c)) for c in cols})


def changes(*parts: Changes) -> ChangeSet:
    cs = ChangeSet()
    for p in parts:
        cs.add(p)
    return cs


def order(i: int, name: str = "n") -> dict:
    return {"id": i, "name": f"{name}{i}", "amount": Decimal("1.50"), "at": dt.datetime(2024, 1, 1, tzinfo=UTC)}


def rows(azure_server, core, settings, table="orders", schema="s") -> dict:
    got = read_delta_table(core.location(settings, schema, table), azure_server.storage_options()).to_pylist()
    return {r["id"]: r for r in got}


def prefix_of(settings) -> str:
    return settings.warehouse.split("/", 3)[3] + "/"


def blobs_outside_tables(azure_server, settings, tables: set[str]) -> list[str]:
    """Every blob under the warehouse that is not inside one of `tables` (schema/table dirs), and
    every marker blob anywhere under it (pyarrow lists those as directories: checked apart)."""
    from pyarrow import fs

    prefix = prefix_of(settings)
    outside = []
    for key in azure_server.list_keys(prefix):
        rest = key[len(prefix):]
        parts = rest.split("/")
        if rest.startswith((STAGING_DIR, TRASH_DIR, PROBE_PREFIX)) or len(parts) < 3 or "/".join(parts[:2]) not in tables:
            outside.append(rest)
    infos = azure_server.filesystem().get_file_info(
        fs.FileSelector(f"{azure_server.container}/{prefix}", allow_not_found=True, recursive=True))
    listed_dirs = {i.path.split("/", 1)[1][len(prefix):] for i in infos if i.type == fs.FileType.Directory}
    implied = {"/".join(k[len(prefix):].split("/")[:i]) for k in azure_server.list_keys(prefix)
               for i in range(1, k[len(prefix):].count("/") + 1)}
    return outside + sorted(f"marker {d}/" for d in listed_dirs - implied)


def test_every_operation_on_azure_leaves_only_tables(azure_server, core, settings, caplog):
    caplog.set_level(logging.DEBUG)
    core.tables.create(settings, "s", ORDERS)
    assert core.location(settings, "s", "orders").startswith("abfss://")
    core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, [order(i) for i in (1, 2, 3)]))))
    update = typed(ORDERS, [{"id": 1, "name": "renamed", "amount": None}], ["id", "name", "amount"])
    core.writer.write(settings, "s", "orders", lambda t: changes(
        Changes(Op.UPDATE, update, pa.table({"name": [False], "amount": [True]})),
        Changes(Op.DELETE, typed(t, [{"id": 2}], ["id"]))))
    core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, [order(3, "again")]))))
    got = rows(azure_server, core, settings)
    assert sorted(got) == [1, 3] and got[1]["name"] == "renamed" and got[1]["amount"] == Decimal("1.50")
    assert got[3]["name"] == "again3"
    assert delta_version(core.location(settings, "s", "orders"), azure_server.storage_options()) == 3
    assert [c.name for c in core.describe(settings, "s", "orders").columns] == ["id", "name", "amount", "at"]

    assert core.tables.alter(settings, "s", ORDERS.with_columns(ORDERS.columns + (Column("note", T.STRING),)), False)
    assert core.migrate(settings, MigrationDetails("s", "orders", RenameColumn("name", "title"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "orders", AddColumnWithDefaultValue("qty", T.INT, "7"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "orders", CopyTable("orders", "copy"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "orders", CopyTableToHistoryMode("orders", "hist"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "copy", RenameTable("copy", "renamed"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "copy", RenameTable("copy", "renamed"))) == SUCCESS  # replay
    assert core.describe(settings, "s", "copy") is None
    assert rows(azure_server, core, settings, "renamed")[1]["qty"] == 7
    assert core.migrate(settings, MigrationDetails("s", "hist", DropTable())) == SUCCESS
    assert core.table_names(settings, "s") == ["orders", "renamed"]
    core.drop_table(settings, "s", "renamed")
    assert core.table_names(settings, "s") == ["orders"]
    assert core.probe(settings) is None   # the setup test warehouse_writable
    assert blobs_outside_tables(azure_server, settings, {"s/orders"}) == []
    assert azure_server.account_key not in caplog.text


def test_a_batch_over_the_local_relation_limit_is_staged_on_azure_and_removed(azure_server, core, settings, monkeypatch):
    monkeypatch.setattr(engine_session, "LOCAL_RELATION_LIMIT", 1)
    monkeypatch.setattr(shipping, "LOCAL_RELATION_LIMIT", 1)
    core.tables.create(settings, "s", ORDERS)
    core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, [order(i) for i in range(200)]))))
    core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, [order(i, "b") for i in range(100, 300)]))))
    got = rows(azure_server, core, settings)
    assert len(got) == 300 and got[150]["name"] == "b150" and got[5]["name"] == "n5"
    assert blobs_outside_tables(azure_server, settings, {"s/orders"}) == []


def test_a_wrong_key_fails_the_setup_test_without_showing_the_key(azure_server, core, caplog):
    caplog.set_level(logging.DEBUG)
    wrong = "d3Jvbmcga2V5IG9mIHRoZSB0ZXN0" * 3
    values = {**azure_server.settings(), "azure_account_key": wrong}
    settings = Settings.create(azure_server.url(f"az-{uuid.uuid4().hex[:8]}/wh"), engine="sail", **values)
    reason = core.probe(settings)
    assert reason, "a wrong key must fail the setup test"
    assert wrong not in reason and azure_server.account_key not in reason
    assert wrong not in caplog.text and azure_server.account_key not in caplog.text


def test_two_sail_engines_writing_one_table_keep_every_commit(azure_server, settings):
    """Two destinations' Sail processes (two engine pools) append to one table at once: Sail writes
    each log entry with If-None-Match: * (Azurite answers 409 BlobAlreadyExists to the loser), the
    core retries the conflict, and no commit is lost."""
    pools = [EnginePool(), EnginePool()]
    cores = [DeltaCore(EngineRouter(p), door="test") for p in pools]
    try:
        cores[0].tables.create(settings, "s", ORDERS)
        errors: list[BaseException] = []

        def writer(n: int) -> None:
            try:
                for i in range(6):
                    key = n * 100 + i
                    cores[n].writer.write(settings, "s", "orders",
                                          lambda t, key=key: changes(Changes(Op.UPSERT, typed(t, [order(key)]))))
            except BaseException as exc:   # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(n,)) for n in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors, errors
        location = cores[0].location(settings, "s", "orders")
        assert sorted(rows(azure_server, cores[0], settings)) == sorted([n * 100 + i for n in (0, 1) for i in range(6)])
        assert delta_version(location, azure_server.storage_options()) == 12
    finally:
        for p in pools:
            p.stop()


def test_the_standard_variables_alone_reach_azurite(azure_server, monkeypatch):
    """A new user's way: AZURE_STORAGE_USE_EMULATOR, AZURITE_BLOB_STORAGE_URL and the account's
    variables in the destination's environment, no azure_* setting. The embedded engine's own
    process (this environment) serves the warehouse."""
    from delta_destination.engines.sail import storage_identity
    from delta_destination.settings import from_environment, from_values

    for key, value in azure_server.env().items():
        monkeypatch.setenv(key, value)
    import os

    settings = from_values({"warehouse": azure_server.url(f"az-{uuid.uuid4().hex[:8]}/wh"), "engine": "sail",
                            **from_environment(os.environ)})
    assert storage_identity(settings.storage) == ""
    pool = EnginePool()
    try:
        core = DeltaCore(EngineRouter(pool), door="test")
        assert core.probe(settings) is None
        core.tables.create(settings, "s", ORDERS)
        core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, [order(i) for i in (1, 2)]))))
        assert sorted(rows(azure_server, core, settings)) == [1, 2]
        assert blobs_outside_tables(azure_server, settings, {"s/orders"}) == []
    finally:
        pool.stop()


def test_the_local_spark_engine_is_refused_on_azure_with_a_clear_error_and_nothing_written(azure_server, core, settings):
    """The local Apache Spark engine has no Azure connector yet: engine spark is refused before a
    JVM starts (no 'No FileSystem for scheme' from deep inside Hadoop), the container keeps nothing,
    and auto keeps its MERGEs on the embedded engine (its memory guard says what it cannot hold)."""
    from dataclasses import replace

    from delta_destination.engines.choice import spark_available
    from delta_destination.errors import UnsupportedOperation

    spark = replace(settings, engine="spark")
    with pytest.raises(UnsupportedOperation) as info:
        core.tables.create(spark, "s", ORDERS)
    assert "not wired for azure" in str(info.value) and azure_server.account_key not in str(info.value)
    assert azure_server.list_keys(prefix_of(settings)) == []
    assert not spark_available(replace(settings, engine="auto"))
    assert spark_available(replace(settings, engine="auto", spark_remote="sc://h:15002"))
