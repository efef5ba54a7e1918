"""The warehouse on Google Cloud Storage, against a GCS API server (fake-gcs-server from PyPI's wheel,
tools/gcs_server.py): the core driven in-process on the session's Apache Spark JVM
(the GCS connector from .spark-jars), tables read back by delta-rs, and the bucket listed afterwards:
nothing may remain outside the tables (no staged batch, probe, trash, half-written copy or folder
marker object).

The embedded Sail engine refuses gs:// (storage/gcs.py): object_store writes through GCS's XML API,
which no emulator here serves; `test_the_emulator_takes_no_object_store_write` keeps that finding
measured, so the day an emulator does, the test says so. Engine auto therefore serves GCS on Spark.
The settings carry a service account key JSON (emulator form: gcs_base_url, disable_oauth) with a
random private key, searched for in the logs.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import secrets
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest

from delta_destination.core.api import DeltaCore
from delta_destination.core.changes import Changes, Op
from delta_destination.core.migrations import (SUCCESS, AddColumnWithDefaultValue, CopyTable, DropTable,
                                               MigrationDetails, RenameColumn, RenameTable)
from delta_destination.core.model import Column, DataType as T, TableSchema
from delta_destination.engines import session as engine_session, shipping
from delta_destination.engines.pool import EnginePool
from delta_destination.engines.router import EngineRouter
from delta_destination.settings import Settings
from delta_destination.private_areas import PROBE_PREFIX, STAGING_DIR, TRASH_DIR
from delta_destination.core.table_dirs import clean_leftovers
from delta_destination.warehouse import Warehouse
from testkit.core_changes import changes, order, rows_by_id, typed
from testkit.delta_read import delta_version
from testkit.removals import leftovers, plant_dead_probe, plant_failed_create

UTC = dt.timezone.utc
ORDERS = TableSchema("orders", (
    Column("id", T.LONG, primary_key=True),
    Column("name", T.STRING),
    Column("amount", T.DECIMAL, precision=12, scale=2),
    Column("at", T.UTC_DATETIME),
))
# A private key that must never reach a log line or an error (the emulator takes no OAuth at all).
PRIVATE_KEY = "-----BEGIN PRIVATE KEY-----\n" + secrets.token_hex(24) + "\n-----END PRIVATE KEY-----\n"


@pytest.fixture(scope="module")
def engines(gcs_server, shared_spark):
    e = EnginePool()
    yield e
    e.stop()


def key_json(gcs_server) -> str:
    return json.dumps({"type": "service_account", "client_email": "test@p.iam.gserviceaccount.com",
                       "private_key_id": "k1", "private_key": PRIVATE_KEY, "project_id": "p",
                       "gcs_base_url": gcs_server.endpoint_url, "disable_oauth": True})


@pytest.fixture
def settings(gcs_server, shared_spark):
    """A fresh prefix of the bucket per test; engine auto with the session's Spark JVM as its Apache Spark."""
    return Settings.create(gcs_server.url(f"gcs-{uuid.uuid4().hex[:8]}/wh"), spark_remote=shared_spark.url,
                           gcs_service_account_key=key_json(gcs_server))





def rows(gcs_server, core, settings, table="orders", schema="s") -> dict:
    return rows_by_id(core.location(settings, schema, table), gcs_server.storage_options())


def prefix_of(settings) -> str:
    return settings.warehouse.split("/", 3)[3] + "/"


def objects_outside_tables(gcs_server, settings, tables: set[str]) -> list[str]:
    """Every object under the warehouse that is not inside one of `tables` (schema/table dirs),
    folder marker objects (`name/`) included."""
    prefix = prefix_of(settings)
    outside = []
    for key in gcs_server.list_keys(prefix):
        rest = key[len(prefix):]
        parts = rest.split("/")
        if rest.startswith((STAGING_DIR, TRASH_DIR, PROBE_PREFIX)) or len(parts) < 3 or "/".join(parts[:2]) not in tables:
            outside.append(rest)
    return outside


def test_every_operation_on_gcs_leaves_only_tables(gcs_server, core, settings, caplog):
    caplog.set_level(logging.DEBUG)
    assert core.probe(settings) is None   # the setup test warehouse_writable
    core.tables.create(settings, "s", ORDERS)
    assert core.location(settings, "s", "orders").startswith("gs://")
    core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, [order(i) for i in (1, 2, 3)]))))
    update = typed(ORDERS, [{"id": 1, "name": "renamed", "amount": None}], ["id", "name", "amount"])
    core.writer.write(settings, "s", "orders", lambda t: changes(
        Changes(Op.UPDATE, update, pa.table({"name": [False], "amount": [True]})),
        Changes(Op.DELETE, typed(t, [{"id": 2}], ["id"]))))
    got = rows(gcs_server, core, settings)
    assert sorted(got) == [1, 3] and got[1]["name"] == "renamed" and got[1]["amount"] == Decimal("1.50")
    assert delta_version(core.location(settings, "s", "orders"), gcs_server.storage_options()) == 2

    assert core.migrate(settings, MigrationDetails("s", "orders", RenameColumn("name", "title"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "orders", AddColumnWithDefaultValue("qty", T.INT, "7"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "orders", CopyTable("orders", "copy"))) == SUCCESS
    assert core.migrate(settings, MigrationDetails("s", "copy", RenameTable("copy", "renamed"))) == SUCCESS
    assert core.describe(settings, "s", "copy") is None
    assert rows(gcs_server, core, settings, "renamed")[1]["qty"] == 7
    assert core.migrate(settings, MigrationDetails("s", "renamed", DropTable())) == SUCCESS
    assert core.table_names(settings, "s") == ["orders"]
    # issue 40: a CreateTable over what a CREATE that died left, and a dead process's probe removed
    prefix = prefix_of(settings)

    def plant(rel: str, data: bytes, folder: bool) -> None:
        gcs_server.put_object(prefix + rel + ("/" if folder else ""), data)

    plant_failed_create(plant, "s/half")
    core.tables.create(settings, "s", TableSchema("half", ORDERS.columns[:2]))
    plant_dead_probe(plant)
    assert clean_leftovers(Warehouse(settings.warehouse, settings.storage)) == 1
    assert objects_outside_tables(gcs_server, settings, {"s/orders", "s/half"}) == []
    assert leftovers(gcs_server.list_keys(prefix), prefix, ["s/orders", "s/half"]) == []
    assert PRIVATE_KEY.splitlines()[1] not in caplog.text


def test_a_batch_over_the_local_relation_limit_is_staged_on_gcs_and_removed(gcs_server, core, settings, monkeypatch):
    """The destination writes the staged Parquet itself (pyarrow's GcsFileSystem), Spark reads it
    through the GCS connector, and the staging prefix is gone after the request."""
    monkeypatch.setattr(engine_session, "LOCAL_RELATION_LIMIT", 1)
    monkeypatch.setattr(shipping, "LOCAL_RELATION_LIMIT", 1)
    core.tables.create(settings, "s", ORDERS)
    core.writer.write(settings, "s", "orders", lambda t: changes(Changes(Op.UPSERT, typed(t, [order(i) for i in range(200)]))))
    got = rows(gcs_server, core, settings)
    assert len(got) == 200 and got[150]["name"] == "n150"
    assert objects_outside_tables(gcs_server, settings, {"s/orders"}) == []


def test_the_standard_variable_alone_reaches_the_emulator(gcs_server, shared_spark, monkeypatch):
    """A new user's way: STORAGE_EMULATOR_HOST in the destination's environment, no gcs_* setting."""
    import os

    from delta_destination.settings import from_environment, from_values

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.endpoint_url)
    settings = from_values({"warehouse": gcs_server.url(f"gcs-{uuid.uuid4().hex[:8]}/wh"),
                            "spark_remote": shared_spark.url, **from_environment(os.environ)})
    assert settings.storage.gcs.endpoint == gcs_server.endpoint_url
    pool = EnginePool()
    try:
        assert DeltaCore(EngineRouter(pool), door="test").probe(settings) is None
        assert objects_outside_tables(gcs_server, settings, set()) == []
    finally:
        pool.stop()


def test_the_embedded_engine_refuses_gcs_with_a_clear_error_and_nothing_written(gcs_server, core, settings):
    from dataclasses import replace

    from delta_destination.errors import UnsupportedOperation

    sail = replace(settings, engine="sail", spark_remote=None)
    with pytest.raises(UnsupportedOperation) as info:
        core.tables.create(sail, "s", ORDERS)
    assert "XML API" in str(info.value) and PRIVATE_KEY.splitlines()[1] not in str(info.value)
    assert gcs_server.list_keys(prefix_of(settings)) == []


def test_the_emulator_takes_no_object_store_write(gcs_server):
    """Why the embedded engine refuses GCS, measured: object_store (delta-rs here, Sail alike) writes a
    file with an XML-API `PUT /bucket/object`, which fake-gcs-server routes to its JSON upload handler
    (`400 invalid uploadType`); and a media upload with ifGenerationMatch=0 of an existing object is not
    refused (no precondition check on that upload kind; multipart uploads are checked, which the
    Iceberg mirror's commits use: tests/engines/test_iceberg_stores.py), so concurrent Delta commits
    could not be tested even then."""
    import urllib.request

    from deltalake import write_deltalake

    path = gcs_server.url(f"gcs-{uuid.uuid4().hex[:8]}/t")
    with pytest.raises(Exception) as info:   # noqa: PT011 - delta-rs raises its own error types
        write_deltalake(path, pa.table({"a": [1]}), storage_options=gcs_server.storage_options())
    assert "400" in str(info.value) and "invalid uploadType" in str(info.value)
    name = f"gcs-{uuid.uuid4().hex[:8]}/_delta_log/00000000000000000000.json"
    url = f"{gcs_server.endpoint_url}/upload/storage/v1/b/{gcs_server.bucket}/o?uploadType=media&name={name}" \
          "&ifGenerationMatch=0"
    codes = [urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST")).status for _ in range(2)]
    assert codes == [200, 200], "the emulator now refuses a second create: test concurrent commits on GCS"
    gcs_server._request("DELETE", f"/storage/v1/b/{gcs_server.bucket}/o/{urllib.parse.quote(name, safe='')}")


@pytest.fixture(scope="module")
def gcs_destination(gcs_server, shared_spark, tmp_path_factory):
    """A destination server process as a user starts one: STORAGE_EMULATOR_HOST in its environment,
    `--warehouse gs://...`, engine auto (its Apache Spark: the session's JVM)."""
    from testkit.server_process import RunningServer

    base = tmp_path_factory.mktemp("gcs-srv")
    srv = RunningServer(gcs_server.url(f"gcs-srv-{uuid.uuid4().hex[:6]}/wh"), base / "server.log",
                        extra_args=("--spark-remote", shared_spark.url), env=gcs_server.env())
    yield srv
    srv.stop()


@pytest.mark.slow
@pytest.mark.parametrize("rel", ["input.json", "schema_migrations_input_dml.json"])
def test_tester_inputs_on_gcs_leave_only_tables(gcs_server, gcs_destination, rel):
    """The public tester inputs against a gs:// warehouse (~3 minutes for input.json on 2 cores: every
    request on Spark), read back by delta-rs, nothing private left in the bucket."""
    import hashlib

    from delta_destination.doors.fivetran.batch_files import Compression
    from testkit import tester as tc
    from testkit.server_process import TESTER_INPUTS

    schema = "g_" + hashlib.sha1(rel.encode()).hexdigest()[:10]
    r = tc.run_input_file(gcs_destination.stub, gcs_destination.warehouse, TESTER_INPUTS / rel, schema,
                          live_only=False, compression=Compression.ZSTD, run_migrations="migrations" in rel,
                          storage_options=gcs_server.storage_options())
    assert r.ok, "\n".join(r.problems)
    prefix = gcs_destination.warehouse.split("/", 3)[3] + "/"
    assert [k for k in gcs_server.list_keys(prefix) if "/_fivetran_" in "/" + k[len(prefix):]] == []
