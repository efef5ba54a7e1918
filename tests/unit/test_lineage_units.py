"""Lineage pieces without a server: the background sender, attach() configuration rules, the
core's version fill-in, the Airflow client against a loopback stand-in, FAIL events."""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid

import pytest
from openlineage.client.event_v2 import RunState
from openlineage.client.serde import Serde

from delta_destination import lineage
from delta_destination.core.api import DeltaCore
from delta_destination.errors import InvalidRequest
from delta_destination.core.events import Events, TableEvent
from delta_destination.engines.pool import EnginePool
from delta_destination.engines.router import EngineRouter
from delta_destination.lineage.airflow_assets import AirflowAssets, AirflowConfig, AssetEvent
from delta_destination.lineage.listeners import CommitLog
from delta_destination.lineage.openlineage_events import run_event
from delta_destination.lineage.sender import BackgroundSender
from delta_destination.warehouse import Warehouse
from testkit.airflow_standin import AirflowStandIn
from testkit.openlineage_check import EventValidator


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No OpenLineage/Airflow configuration from the machine: env, cwd and home are empty."""
    import os

    for k in list(os.environ):
        if k.startswith(("OPENLINEAGE", "DELTA_LINEAGE_")):
            monkeypatch.delenv(k)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def lineage_log(caplog):
    caplog.set_level(logging.INFO, logger="delta_destination")
    logging.getLogger("delta_destination").propagate = True
    return caplog


# ---- the sender --------------------------------------------------------------------------------

def test_a_blocked_endpoint_never_blocks_submit_and_drops_beyond_capacity(lineage_log):
    release = threading.Event()
    got = []
    sender = BackgroundSender("test", lambda item: (release.wait(10), got.append(item)), capacity=3)
    start = time.monotonic()
    accepted = [sender.submit(i) for i in range(100)]
    assert time.monotonic() - start < 0.5
    assert sum(accepted) <= 4 and sender.dropped >= 96
    assert sum("queue is full" in r.message for r in lineage_log.records) == 1, "warnings are rate-limited"
    release.set()
    assert sender.flush(5)
    assert got == [i for i, ok in enumerate(accepted) if ok]
    assert sender.close(1)


def test_a_failing_send_is_a_warning_with_the_class_only(lineage_log):
    def send(item):
        raise ConnectionError("http://user:hunter2@host/ refused")

    sender = BackgroundSender("test", send)
    sender.submit(1)
    assert sender.flush(5) and sender.failed == 1
    warnings = [r.message for r in lineage_log.records if r.levelno == logging.WARNING]
    assert warnings == ["test: sending failed (ConnectionError); 1 failure(s) so far; writes are unaffected"]
    sender.close(1)


# ---- attach() ------------------------------------------------------------------------------------

def core():
    return DeltaCore(EngineRouter(EnginePool()), door="testdoor")


def test_off_unless_configured(clean_env):
    c = core()
    got = lineage.attach(c)
    assert got.openlineage is None and got.airflow is None
    assert [type(x) for x in c.events.listeners] == [CommitLog]


@pytest.mark.parametrize("config", [
    {"transport": {"type": "console"}},
    {"transport": {"type": "composite", "transports": {"a": {"type": "file", "log_file_path": "x.jsonl"},
                                                         "b": {"type": "console"}}}},
])
def test_a_console_transport_is_refused(clean_env, lineage_log, config):
    got = lineage.attach(core(), openlineage_config=config)
    assert got.openlineage is None
    assert any("console transport" in r.message for r in lineage_log.records)


def test_configured_by_environment_and_by_openlineage_yml(clean_env, monkeypatch):
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(clean_env / "events.jsonl"))
    got = lineage.attach(core())
    assert got.openlineage is not None and got.openlineage.job_namespace == "testdoor-delta"
    got.close(1)
    monkeypatch.delenv("OPENLINEAGE__TRANSPORT__TYPE")
    monkeypatch.delenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH")
    (clean_env / "openlineage.yml").write_text(
        f"transport:\n  type: file\n  log_file_path: {clean_env / 'yml.jsonl'}\n  append: true\n")
    monkeypatch.setenv("OPENLINEAGE_NAMESPACE", "lake-loads")
    got = lineage.attach(core())
    assert got.openlineage is not None and got.openlineage.job_namespace == "lake-loads"
    got.close(1)
    monkeypatch.setenv("OPENLINEAGE_DISABLED", "true")
    assert lineage.attach(core()).openlineage is None


def test_a_broken_configuration_leaves_lineage_off_with_a_warning(clean_env, lineage_log):
    got = lineage.attach(core(), openlineage_config={"transport": {"type": "no-such-transport"}})
    assert got.openlineage is None
    assert any("could not be used" in r.message for r in lineage_log.records)


# ---- the core: listeners see the version the commit wrote ---------------------------------------------

def test_events_fill_in_the_committed_version_and_survive_failing_listeners(tmp_path):
    location = tmp_path / "s" / "t"
    (location / "_delta_log").mkdir(parents=True)
    for v in (0, 1, 7):
        (location / "_delta_log" / f"{v:020d}.json").write_text("{}\n")
    seen = []

    class Broken:
        def started(self, event):
            raise RuntimeError("boom")

        completed = failed = started

    class Recorder:
        def started(self, event):
            seen.append(("started", event.table))

        def completed(self, event, outcome):
            seen.append(("completed", outcome.version))

        def failed(self, event, error):
            seen.append(("failed", type(error).__name__))

    events = Events("d")
    events.listeners += [Broken(), Recorder()]
    with events.operation("WriteBatch", "s", "t", str(location), Warehouse(str(tmp_path))) as outcome:
        outcome.committed = True
    with events.operation("Migrate:drop_table", "s", "t", str(location)) as outcome:
        outcome.committed = True  # a local location without its warehouse (as migrations name it)
    with events.operation("WriteBatch", "s", "t", str(location)):
        pass  # nothing committed: no version
    with pytest.raises(InvalidRequest):
        with events.operation("WriteBatch", "s", "t", str(location)):
            raise InvalidRequest("bad")
    assert seen == [("started", "t"), ("completed", 7), ("started", "t"), ("completed", 7),
                    ("started", "t"), ("completed", None), ("started", "t"), ("failed", "InvalidRequest")]


def test_a_log_that_cannot_be_read_never_fails_a_committed_operation(lineage_log):
    """Reading the version is reporting only: an object store's error (not an OSError) after the
    commit leaves the version unknown and the operation successful."""
    class UnreachableStore:
        can_list = True

        def list(self, location, recursive=False):
            raise RuntimeError("endpoint unreachable")

    class Unreachable(Warehouse):
        @property
        def storage(self):
            return UnreachableStore()

    seen = []

    class Recorder:
        def started(self, event):
            pass

        def completed(self, event, outcome):
            seen.append(("completed", outcome.version))

        def failed(self, event, error):
            seen.append(("failed", type(error).__name__))

    events = Events("d")
    events.listeners.append(Recorder())
    with events.operation("WriteBatch", "s", "t", "s3://bucket/wh/s/t", Unreachable("s3://bucket/wh")) as outcome:
        outcome.committed = True
    assert seen == [("completed", None)]
    assert any("could not be read (RuntimeError)" in r.getMessage() for r in lineage_log.records)


def test_a_doors_working_tables_get_no_lineage_but_keep_their_commit_log_line(tmp_path, lineage_log):
    from delta_destination.lineage.listeners import AirflowListener

    sent = []
    events = Events("airbyte")
    events.working_table = lambda schema, table: table.startswith(".tmp")
    airflow = AirflowListener(sent.append)
    events.listeners += [airflow, CommitLog()]
    for table in (".tmp_staging", "real"):
        with events.operation("AirbyteWrite", "s", table, str(tmp_path / "s" / table)) as outcome:
            outcome.committed, outcome.version = True, 1
    airflow.close(5)
    assert [e.uri for e in sent] == [f"file://{tmp_path}/s/real"]
    committed = [r.getMessage() for r in lineage_log.records if "committed" in r.getMessage()]
    assert committed == [f"AirbyteWrite committed file://{tmp_path}/s/=2Etmp_staging at Delta version 1",  # the name as a path component
                         f"AirbyteWrite committed file://{tmp_path}/s/real at Delta version 1"]


def test_row_counts_come_from_the_commits_operation_metrics(tmp_path):
    from delta_destination.core.delta_log import commit_info, row_counts

    log_dir = tmp_path / "_delta_log"
    log_dir.mkdir()
    spark_merge = {"commitInfo": {"operation": "MERGE", "engineInfo": "Apache-Spark/4.0.1 Delta-Lake/4.0.0",
                                  "operationMetrics": {"numTargetRowsInserted": "7", "numTargetRowsUpdated": "2",
                                                       "numTargetRowsDeleted": "1", "numOutputRows": "40"}}}
    (log_dir / "00000000000000000003.json").write_text(
        json.dumps({"add": {"path": "x.parquet"}}) + "\n" + json.dumps(spark_merge) + "\n")
    warehouse = Warehouse(str(tmp_path))
    assert row_counts(commit_info(warehouse, str(tmp_path), 3)) == (7, 2, 1)
    assert commit_info(warehouse, str(tmp_path), 4) is None  # no such commit
    assert row_counts({"operation": "WRITE", "operationMetrics": {"numOutputRows": 5}}) == (5, 0, 0)
    assert row_counts({"operation": "UPDATE", "operationMetrics": {"numUpdatedRows": "3"}}) == (0, 3, 0)
    assert row_counts({"operation": "DELETE", "operationMetrics": {"numDeletedRows": 4}}) == (0, 0, 4)
    assert row_counts({"operation": "ADD COLUMNS"}) is None
    assert row_counts({"operation": "MERGE", "operationMetrics": {"numTargetRowsInserted": "many"}}) is None


def test_a_write_reports_the_engines_counts_and_a_schema_rewrite_none(tmp_path):
    """Counts replace the request's only for data writes (the operation said it wrote rows)."""
    location = tmp_path / "t"
    (location / "_delta_log").mkdir(parents=True)
    merge = {"commitInfo": {"operation": "MERGE", "operationMetrics": {
        "numTargetRowsInserted": 1, "numTargetRowsUpdated": 1, "numTargetRowsDeleted": 0}}}
    (location / "_delta_log" / "00000000000000000000.json").write_text(json.dumps(merge) + "\n")
    seen = []

    class Outcomes:
        def started(self, event):
            pass

        def completed(self, event, outcome):
            seen.append(outcome)

        failed = completed

    events = Events("fivetran")
    events.listeners.append(Outcomes())
    warehouse = Warehouse(str(tmp_path))  # as the catalog passes it (TableRef.warehouse)
    with events.operation("WriteBatch", "s", "t", str(location), warehouse) as outcome:
        outcome.committed, outcome.inserted, outcome.updated, outcome.deleted = True, 2, 0, 0  # 2 upserts
    with events.operation("AlterTable", "s", "t", str(location), warehouse) as outcome:
        outcome.committed, outcome.lifecycle = True, "ALTER"
    assert (seen[0].inserted, seen[0].updated, seen[0].deleted) == (1, 1, 0)
    assert (seen[1].inserted, seen[1].updated, seen[1].deleted) == (None, None, None)


# ---- FAIL events say nothing a customer value could be in ---------------------------------------------

def test_fail_events_carry_typed_messages_or_the_class_only():
    validator = EventValidator()
    ev = TableEvent(str(uuid.uuid4()), "fivetran", "WriteBatch", "s", "t", "/tmp/wh/s/t")
    typed = json.loads(Serde.to_json(run_event(RunState.FAIL, ev, "ns", "file:///tmp/wh/s/t",
                                               error=InvalidRequest("column 'x' row 3: bad value"))))
    other = json.loads(Serde.to_json(run_event(RunState.FAIL, ev, "ns", "file:///tmp/wh/s/t",
                                               error=ValueError("secret customer value 4111-1111"))))
    assert typed["run"]["facets"]["errorMessage"]["message"] == "InvalidRequest: column 'x' row 3: bad value"
    assert other["run"]["facets"]["errorMessage"]["message"] == "ValueError"
    assert validator.errors(typed) == [] and validator.errors(other) == []
    bad = dict(other, eventType="EXPLODED")
    assert validator.errors(bad), "the validator must catch a bad event"


# ---- Airflow asset events ------------------------------------------------------------------------------

def test_airflow_posts_to_every_asset_with_the_exact_uri_and_refreshes_an_expired_token():
    uri = "s3://lake/wh/s/t"
    standin = AirflowStandIn(assets=[{"id": 1, "uri": uri}, {"id": 2, "uri": uri + "2"}, {"id": 3, "uri": uri}]).start()
    try:
        client = AirflowAssets(AirflowConfig(url=standin.url, username=standin.username, password=standin.password,
                                             timeout=5))
        assert client.send(AssetEvent(uri, {"delta_version": 4})) == 2
        standin.token = "rotated"  # the server expired our token
        assert client.send(AssetEvent(uri, {"delta_version": 5})) == 2
        paths = [(r.method, r.path) for r in standin.requests]
        assert paths.count(("POST", "/auth/token")) == 2
        posts = [r.body for r in standin.requests if r.path == "/api/v2/assets/events" and r.headers.get(
            "Authorization") in ("Bearer tok-123", "Bearer rotated")]
        assert [(p["asset_id"], p["extra"]["delta_version"]) for p in posts][-4:] == [(1, 4), (3, 4), (1, 5), (3, 5)]
        assert "s3cret-pw" not in repr(client.config)
    finally:
        standin.stop()


def test_airflow_without_a_declared_asset_posts_nothing_and_a_static_token_works():
    standin = AirflowStandIn(assets=[{"id": 1, "uri": "s3://other/x"}]).start()
    try:
        client = AirflowAssets(AirflowConfig(url=standin.url, token=standin.token))
        assert client.send(AssetEvent("s3://lake/wh/s/t", {})) == 0
        assert [(r.method, r.path) for r in standin.requests] == [("GET", "/api/v2/assets")]
    finally:
        standin.stop()
