"""The warehouse on Azure Storage, against a real Azure Storage API server (Azurite,
tools/azure_server.py) on the embedded Sail engine: the core driven in-process
(as tests/engines/test_object_storage.py does on S3), tables read back by delta-rs, and the
container listed afterwards: nothing may remain outside the tables (no staged batch, probe, trash,
half-written copy or marker blob).

Azurite serves Blob, not ADLS Gen2's DFS endpoint; Sail and delta-rs reach `abfss://` URLs through
object_store, which speaks Blob anyway. Settings are given explicitly (the azure_* fields, in emulator
mode) and this process's environment has no AZURE_* variable: they reach Sail through a process of
its own. The account key is random per server, so the logs can be searched for it.

On the Apache Spark engine (the session's shared JVM, hadoop-azure's ABFS on Azurite's Blob endpoint,
as `abfs://` over plain HTTP): the removals (a rename, a drop, a create over a failed one, the setup
test, a dead probe's cleanup; issue 40: ABFS marks every folder with a blob of its name), the public
tester inputs through a `--engine spark` server (slow tier), and a Sail and a Spark destination
committing to one table at once (AzureLogStore's rename without overwrite is a conditional copy on the
Blob endpoint: no commit lost). Those servers get the standard variables. Leftovers are looked for in
the container's raw Blob listing (AzureServer.list_blobs), which shows marker blobs as they are.
"""
from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from delta_destination.core.api import DeltaCore
from delta_destination.core.changes import Changes, Op
from delta_destination.core.migrations import (SUCCESS, AddColumnWithDefaultValue, CopyTable, CopyTableToHistoryMode,
                                               DropTable, MigrationDetails, RenameColumn, RenameTable)
from delta_destination.core.model import Column, DataType as T, TableSchema
from delta_destination.engines import session as engine_session, shipping
from delta_destination.engines.pool import EnginePool
from delta_destination.engines.router import EngineRouter
from delta_destination.settings import Settings
from delta_destination.private_areas import PROBE_PREFIX, STAGING_DIR, TRASH_DIR
from delta_destination.core.table_dirs import clean_leftovers, table_location
from delta_destination.warehouse import Warehouse
from testkit.core_changes import changes, order, rows_by_id, typed
from testkit.delta_read import delta_version, read_delta_table
from testkit.removals import leftovers, plant_dead_probe, plant_failed_create

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





def rows(azure_server, core, settings, table="orders", schema="s") -> dict:
    return rows_by_id(core.location(settings, schema, table), azure_server.storage_options())


def prefix_of(settings) -> str:
    return settings.warehouse.split("/", 3)[3] + "/"


def blobs_outside_tables(azure_server, settings, tables: set[str]) -> list[str]:
    """Every blob under the warehouse that is not inside one of `tables` (schema/table dirs), and
    every marker blob anywhere under it (pyarrow lists those as directories: checked apart)."""
    from pyarrow import fs

    prefix = prefix_of(settings)
    outside = []
    keys = azure_server.list_keys(prefix)
    # Hadoop ABFS (the Spark engine) on a flat namespace marks each folder it creates with an empty
    # blob of the folder's name: such a blob above other blobs is a folder, not an object.
    folders = {"/".join(k.split("/")[:i]) for k in keys for i in range(1, k.count("/") + 1)}
    for key in keys:
        if key in folders:
            continue
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


@pytest.fixture(params=["sail", "spark"])
def engine_name(request):
    return request.param


def test_removals_on_azure_leave_nothing_under_removed_prefixes(azure_server, core, engine_name, request):
    """Issue 40: on Spark, Hadoop ABFS marks every folder it makes with a blob of the folder's name,
    and the removals took a marked table for that one blob. A RenameTable (a copy, then a drop of
    the source), a DropTable, a CreateTable over what a CREATE that died left, the setup test, and
    the removal of a dead process's probe: afterwards the container's own listing (every blob as
    stored) holds only the remaining table and its folders' markers."""
    extra = {"spark_remote": request.getfixturevalue("shared_spark").url} if engine_name == "spark" else {}
    settings = Settings.create(azure_server.url(f"rm-{uuid.uuid4().hex[:8]}/wh"), engine=engine_name,
                               **azure_server.settings(), **extra)
    prefix = prefix_of(settings)

    def plant(rel: str, data: bytes, folder: bool) -> None:
        if folder:
            azure_server.put_folder_marker(prefix + rel)
        else:
            with azure_server.filesystem().open_output_stream(f"{azure_server.container}/{prefix}{rel}") as f:
                f.write(data)

    core.tables.create(settings, "s", ORDERS)
    batch = [order(i) for i in (1, 2, 3)]
    core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, batch))))
    assert core.migrate(settings, MigrationDetails("s", "orders", RenameTable("orders", "renamed"))) == SUCCESS
    assert sorted(rows(azure_server, core, settings, "renamed")) == [1, 2, 3]
    assert core.migrate(settings, MigrationDetails("s", "renamed", DropTable())) == SUCCESS
    assert core.table_names(settings, "s") == []
    plant_failed_create(plant, "s/half")
    core.tables.create(settings, "s", TableSchema("half", ORDERS.columns[:2]))
    assert core.probe(settings) is None   # the setup test warehouse_writable
    dead = plant_dead_probe(plant)
    assert any(b.startswith(prefix + dead + "/") for b in azure_server.list_blobs(prefix))
    assert clean_leftovers(Warehouse(settings.warehouse, settings.storage)) == 1
    assert leftovers(azure_server.list_blobs(prefix), prefix, ["s/half"]) == []
    assert core.table_names(settings, "s") == ["half"] and rows(azure_server, core, settings, "half") == {}


def test_removing_a_tree_that_hadoop_abfs_marked_takes_its_markers_and_nothing_beside(azure_server):
    """Issue 40's cause, at the store: Hadoop ABFS marks each folder it makes on a flat namespace
    with an empty blob of the folder's name, which pyarrow reports as a file. A table's removal
    (data first, the log last) and a probe's take every blob under the prefix and the marker of the
    prefix itself; a sibling table and the schema stay, and a listing names each folder once."""
    from delta_destination.storage import storage_for

    base = f"abfs-{uuid.uuid4().hex[:8]}/wh"
    settings = Settings.create(azure_server.url(base), **azure_server.settings())
    storage = storage_for(settings.warehouse, settings.storage)
    fs_ = azure_server.filesystem()

    def plant_table(rel: str) -> None:
        for folder in (rel, f"{rel}/_delta_log", f"{rel}/_delta_log/_staged_commits", f"{rel}/Bx"):
            azure_server.put_folder_marker(f"{base}/{folder}")
        for name, data in ((f"{rel}/_delta_log/00000000000000000000.json", b"{}"),
                           (f"{rel}/Bx/part-0.parquet", b"PAR1"), (f"{rel}/part-1.parquet", b"PAR1")):
            with fs_.open_output_stream(f"{azure_server.container}/{base}/{name}") as f:
                f.write(data)

    azure_server.put_folder_marker(f"{base}/s")
    for rel in ("s/t", "s/keep", f"{PROBE_PREFIX}x"):
        plant_table(rel)
    listed = storage.list(azure_server.url(f"{base}/s/t"))
    assert sorted((e.name, e.is_dir) for e in listed) == [("Bx", True), ("_delta_log", True), ("part-1.parquet", False)]
    storage.delete_table_files(azure_server.url(f"{base}/s/t"))
    storage.delete_tree(azure_server.url(f"{base}/{PROBE_PREFIX}x"))
    left = [b[len(base) + 1:] for b in azure_server.list_blobs(base + "/")]
    assert leftovers(left, "", ["s/keep"]) == []
    assert "s/keep/_delta_log/00000000000000000000.json" in left and "s" in left
    assert not storage.exists(azure_server.url(f"{base}/s/t"))


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


def test_auto_counts_on_the_local_spark_engine_for_azure_unless_its_jars_lack_hadoop_azure(
        azure_server, settings, tmp_path, monkeypatch):
    """The local Apache Spark engine has ABFS (hadoop-azure, `make install`): auto may send what
    Sail cannot serve to it. A .spark-jars fetched before hadoop-azure was added is refused with a
    clear error before a JVM starts (no 'No FileSystem for scheme' from deep inside Hadoop), and
    the container keeps nothing. (Spark itself on Azure: the tester-input and two-writers tests.)"""
    from dataclasses import replace

    from delta_destination.engines.choice import spark_available, spark_installed
    from delta_destination.engines.spark_process import jars_dir
    from delta_destination.errors import UnsupportedOperation

    if spark_installed():
        assert spark_available(replace(settings, engine="auto"))
    old = tmp_path / "old-jars"
    old.mkdir()
    for jar in jars_dir().glob("*.jar"):
        if not jar.name.startswith("hadoop-azure-"):
            (old / jar.name).symlink_to(jar)
    monkeypatch.setenv("DELTA_DESTINATION_SPARK_JARS", str(old))
    pool = EnginePool()
    try:
        with pytest.raises(UnsupportedOperation) as info:
            DeltaCore(EngineRouter(pool), door="test").tables.create(replace(settings, engine="spark"), "s", ORDERS)
    finally:
        pool.stop()
    assert "hadoop-azure" in str(info.value) and "make install" in str(info.value)
    assert azure_server.account_key not in str(info.value)
    assert azure_server.list_keys(prefix_of(settings)) == []
    assert spark_available(replace(settings, engine="auto", spark_remote="sc://h:15002"))


def start_server(dedicated_server, azure_server, tmp_path, engine, warehouse, name):
    """A destination process started as a user would: the standard Azure variables (emulator mode)
    in its environment, `--warehouse abfss://...`; a Spark one reaches the session's shared JVM,
    whose session gets the ABFS settings over Spark Connect (never on a command line)."""
    return dedicated_server(warehouse, tmp_path / f"{name}.log", engine=engine, env=azure_server.env())


# The full tier runs both inputs on the embedded engine (~10 s each); on Spark (input.json 90 s with the
# shared JVM, the migrations input ~9 minutes) in `make test-slow`, while the two-writers test below and
# the removals test above keep Spark on Azure in the full tier.
@pytest.mark.parametrize("engine_name,rel", [
    ("sail", "input.json"), ("sail", "schema_migrations_input_dml.json"),
    pytest.param("spark", "input.json", marks=pytest.mark.slow),
    pytest.param("spark", "schema_migrations_input_dml.json", marks=pytest.mark.slow)])
def test_tester_input_on_azure_through_a_server(azure_server, dedicated_server, tmp_path, engine_name, rel):
    """A public tester input through a Fivetran server on each engine (Spark: ABFS on Azurite's Blob
    endpoint): input.json (live: creates, upserts, updates, soft and hard deletes, truncates), and
    schema_migrations_input_dml.json (drops, renames and copies of tables among its migrations);
    delta-rs reads every table back. Afterwards the container holds only the input's final tables
    (no blob of a dropped or renamed-away table, none of the destination's own), and the account key
    is in no log line."""
    from testkit import tester as tc
    from testkit.server_process import TESTER_INPUTS

    warehouse = azure_server.url(f"tester-{uuid.uuid4().hex[:8]}/wh")
    srv = start_server(dedicated_server, azure_server, tmp_path, engine_name, warehouse, engine_name)
    log: list[str] = []
    result = tc.run_input_file(srv.stub, warehouse, TESTER_INPUTS / rel, "tester", log=log.append,
                               storage_options=azure_server.storage_options(),
                               live_only="migrations" not in rel, run_migrations="migrations" in rel)
    assert result.ok, "\n".join(log + result.problems)
    settings = Settings.create(warehouse, engine="sail", **azure_server.settings())
    tables = {table_location(tc.warehouse_of(warehouse), "tester", t)[len(warehouse) + 1:] for t in result.tables}
    assert tables and blobs_outside_tables(azure_server, settings, tables) == []
    assert leftovers(azure_server.list_blobs(prefix_of(settings)), prefix_of(settings), tables) == []
    srv.stop()
    assert azure_server.account_key not in Path(srv.log_path).read_text(errors="replace")


@pytest.mark.parametrize("engine_name", ["spark"])
def test_a_sail_and_a_spark_destination_writing_one_table_keep_every_commit(azure_server, dedicated_server, tmp_path,
                                                                            engine_name):
    """A Sail destination and a Spark destination (two processes, two engines) commit to one table
    on Azure at the same time. Sail writes each log entry with If-None-Match: *; Delta on Spark
    (AzureLogStore) writes a temporary file and renames it without overwrite, which ABFS does
    with a conditional copy (If-None-Match: * on the Blob endpoint; a conditional rename on DFS):
    the loser of either kind gets a conflict and retries, so no commit is lost."""
    from testkit.fivetran_requests import batch_file, col, table, write_request
    from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb

    t = table("two", col("id", "LONG", pk=True), col("v", "STRING"), col("n", "LONG"))
    warehouse = azure_server.url(f"two-{uuid.uuid4().hex[:8]}/wh")
    sail = start_server(dedicated_server, azure_server, tmp_path, "sail", warehouse, "sail")
    spark = start_server(dedicated_server, azure_server, tmp_path, engine_name, warehouse, "spark")
    assert sail.stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=t)).success
    per_writer = 5
    errors: list[str] = []

    def write(srv, first_id):
        for k in range(per_writer):
            rows_ = [{"id": first_id + k, "v": f"w{first_id}", "n": k}]
            try:
                assert srv.stub.WriteBatch(write_request("s", t, replace=[batch_file(tmp_path, t, rows_)]),
                                           timeout=600).success
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(f"{first_id}: {exc!r}")

    threads = [threading.Thread(target=write, args=(sail, 1000)), threading.Thread(target=write, args=(spark, 2000))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(900)
    assert errors == []
    path = f"{warehouse}/s/two"
    got = {r["id"] for r in read_delta_table(path, azure_server.storage_options()).to_pylist()}
    assert sorted(got) == [1000 + k for k in range(per_writer)] + [2000 + k for k in range(per_writer)]
    assert delta_version(path, azure_server.storage_options()) == 2 * per_writer   # one commit each, none lost
    for srv in (sail, spark):
        srv.stop()
        assert azure_server.account_key not in Path(srv.log_path).read_text(errors="replace")
