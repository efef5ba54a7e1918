"""Lineage from the Fivetran door: a real server process configured the client's standard ways
(OPENLINEAGE__TRANSPORT__* -> file transport; DELTA_LINEAGE_AIRFLOW_* -> a loopback Airflow
stand-in), real CreateTable/WriteBatch with real encrypted batch files, events validated
offline against the OpenLineage JSON Schemas, versions checked against the Delta log."""
from __future__ import annotations

import json
import time

import grpc
import pytest

from testkit.fivetran_requests import batch_file, col, expect_error, table, write_request
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.lineage import table_uri
from testkit.airflow_standin import AirflowStandIn
from testkit.delta_read import delta_version, read_delta_table
from testkit.openlineage_check import EventValidator, read_events, runs, wait_for

ORDERS = table("orders", col("id", "INT", pk=True), col("amount", "DECIMAL", precision=10, scale=2),
               col("note", "STRING"), col("_fivetran_synced", "UTC_DATETIME"))
SYNCED = "2024-05-01T12:00:00.000Z"


def rows(*ids, note="n"):
    return [{"id": i, "amount": "1.50", "note": note, "_fivetran_synced": SYNCED} for i in ids]




@pytest.fixture(scope="module")
def airflow_standin():
    standin = AirflowStandIn().start()
    yield standin
    standin.stop()


@pytest.fixture(scope="module")
def lineage_server(tmp_path_factory, airflow_standin, dedicated_server):
    base = tmp_path_factory.mktemp("lineage")
    events = base / "openlineage.jsonl"
    env = {
        "OPENLINEAGE__TRANSPORT__TYPE": "file",
        "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(events),
        "OPENLINEAGE__TRANSPORT__APPEND": "true",
        "DELTA_LINEAGE_AIRFLOW_URL": airflow_standin.url,
        "DELTA_LINEAGE_AIRFLOW_USERNAME": airflow_standin.username,
        "DELTA_LINEAGE_AIRFLOW_PASSWORD": airflow_standin.password,
    }
    srv = dedicated_server(base / "warehouse", base / "server.log", env=env)
    srv.events_path = events
    yield srv
    srv.stop()


def test_writes_produce_schema_valid_openlineage_runs_with_versions_and_counts(lineage_server, airflow_standin, tmp_path):
    srv, stub = lineage_server, lineage_server.stub
    schema = "sales"
    location = f"{srv.warehouse}/{schema}/orders"
    uri = table_uri(str(srv.warehouse), schema, "orders")
    assert uri == f"file://{srv.warehouse}/{schema}/orders"
    airflow_standin.assets[:] = [{"id": 7, "uri": uri}, {"id": 8, "uri": uri + "_old"}, {"id": 9, "uri": uri}]

    assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=ORDERS)).success
    v_create = delta_version(location)
    assert stub.WriteBatch(write_request(schema, ORDERS, replace=[batch_file(tmp_path, ORDERS, rows(1, 2, 3))])).success
    v_first = delta_version(location)
    req = write_request(
        schema, ORDERS,
        replace=[batch_file(tmp_path, ORDERS, rows(4))],
        update=[batch_file(tmp_path, ORDERS, [{"id": 2, "note": "changed", "_fivetran_synced": SYNCED}], kind="update",
                           columns=["id", "note", "_fivetran_synced"])],
        delete=[batch_file(tmp_path, ORDERS, [{"id": 3, "_fivetran_synced": SYNCED}], kind="delete",
                           columns=["id", "_fivetran_synced"])],
    )
    assert stub.WriteBatch(req).success
    v_second = delta_version(location)
    missing = table("nope", col("id", "INT", pk=True))
    expect_error(lambda: stub.WriteBatch(write_request(schema, missing, replace=[batch_file(tmp_path, missing, [{"id": 1}])])),
                 grpc.StatusCode.NOT_FOUND)
    assert sorted(r["id"] for r in read_delta_table(location).to_pylist()) == [1, 2, 4]

    events = wait_for(lambda: read_events(srv.events_path), 8)
    assert len(events) == 8, f"expected 4 runs x 2 events, got {len(events)}"
    validator = EventValidator()
    for e in events:
        assert validator.errors(e) == [], (e["eventType"], validator.errors(e))

    by_run = runs(events)
    assert len(by_run) == 4
    ordered = [by_run[k] for k in dict.fromkeys(e["run"]["runId"] for e in events)]
    for run in ordered:
        assert [e["eventType"] for e in run][0] == "START" and len(run) == 2
    create, first, second, failed = ordered

    def output(run):
        (out,) = run[1]["outputs"]
        return out

    for run in (create, first, second):
        assert run[1]["eventType"] == "COMPLETE"
        out = output(run)
        assert (out["namespace"], out["name"]) == ("file", location)
        assert run[1]["job"] == {**run[1]["job"], "namespace": "fivetran-delta", "name": "sales.orders"}
        assert [f["name"] for f in out["facets"]["schema"]["fields"]] == ["id", "amount", "note", "_fivetran_synced"]
        assert out["facets"]["schema"]["fields"][1]["type"] == "decimal(10,2)"
        assert out["facets"]["storage"]["storageLayer"] == "delta"
    assert create[1]["job"]["facets"]["jobType"]["jobType"] == "CREATE_TABLE"
    assert output(create)["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "CREATE"
    assert output(create)["facets"]["version"]["datasetVersion"] == str(v_create)
    assert output(first)["facets"]["version"]["datasetVersion"] == str(v_first)
    assert output(first)["outputFacets"]["outputStatistics"]["rowCount"] == 3
    commit = output(second)["outputFacets"]["deltaDestination_commit"]
    assert output(second)["facets"]["version"]["datasetVersion"] == str(v_second) and v_second == v_first + 1
    assert (commit["inserted"], commit["updated"], commit["deleted"]) == (1, 1, 1)
    assert commit["operation"] == "WriteBatch" and commit["door"] == "fivetran"
    assert failed[1]["eventType"] == "FAIL"
    assert "TableNotFound" in failed[1]["run"]["facets"]["errorMessage"]["message"]
    assert failed[1]["job"]["name"] == "sales.nope"

    # The commit log line names the table by its canonical URI and version.
    log = srv.log_text()
    assert f"WriteBatch committed {uri} at Delta version {v_second}" in log
    # stdout stays Fivetran's JSON log: no event went to the console, no client chatter among our lines
    # (the helper merges stderr into the same file, where the engine may add its own non-JSON lines).
    assert "eventType" not in log and "runId" not in log
    ours = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert ours and all(line["message-origin"] == "sdk_destination" for line in ours)

    # Airflow: token once, then per commit a lookup by URI and one event per asset with exactly that URI.
    posts = wait_for(lambda: [r for r in airflow_standin.requests if r.path == "/api/v2/assets/events"], 6)
    assert len(posts) == 6, "3 commits x 2 assets with the exact URI"
    assert {p.body["asset_id"] for p in posts} == {7, 9}
    assert [p.body["extra"]["delta_version"] for p in posts] == [v_create, v_create, v_first, v_first, v_second, v_second]
    assert posts[-1].body["extra"]["inserted"] == 1 and posts[-1].body["extra"]["deleted"] == 1
    assert set(posts[-1].body) == {"asset_id", "extra"}
    assert posts[2].body["extra"]["openlineage_run_id"] == first[0]["run"]["runId"]
    tokens = [r for r in airflow_standin.requests if r.path == "/auth/token"]
    assert len(tokens) == 1
    lookups = [r for r in airflow_standin.requests if r.path == "/api/v2/assets"]
    assert lookups and all(r.query["uri_pattern"] == [uri] for r in lookups)
    assert all(r.headers.get("Authorization") == f"Bearer {airflow_standin.token}"
               for r in airflow_standin.requests if r.path != "/auth/token")
    assert airflow_standin.password not in log and airflow_standin.token not in log


def test_alter_truncate_and_migrate_report_their_lifecycle(lineage_server, tmp_path):
    srv, stub = lineage_server, lineage_server.stub
    schema = "ops"
    location = f"{srv.warehouse}/{schema}/orders"
    before = len(read_events(srv.events_path))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=ORDERS)).success
    wider = table("orders", *ORDERS.columns, col("extra", "LONG"))
    assert stub.AlterTable(pb.AlterTableRequest(schema_name=schema, table=wider)).success
    v_alter = delta_version(location)
    assert stub.WriteBatch(write_request(schema, wider, replace=[batch_file(tmp_path, wider, rows(1, 2))])).success
    truncate = pb.TruncateRequest(schema_name=schema, table_name="orders", synced_column="_fivetran_synced")
    truncate.utc_delete_before.FromSeconds(2_000_000_000)
    assert stub.Truncate(truncate).success
    v_truncate = delta_version(location)
    rename = pb.MigrateRequest(details=pb.MigrationDetails(
        schema=schema, table="orders", rename=pb.RenameOperation(
            rename_column=pb.RenameColumn(from_column="note", to_column="memo"))))
    assert stub.Migrate(rename).success
    v_migrate = delta_version(location)

    events = wait_for(lambda: read_events(srv.events_path), before + 10)[before:]
    assert len(events) == 10
    validator = EventValidator()
    assert all(validator.errors(e) == [] for e in events), [validator.errors(e) for e in events]
    done = [e for e in events if e["eventType"] == "COMPLETE"]
    kinds = [e["job"]["facets"]["jobType"]["jobType"] for e in done]
    assert kinds == ["CREATE_TABLE", "ALTER_TABLE", "WRITE_BATCH", "TRUNCATE", "MIGRATE_RENAME_COLUMN"]
    facets = [e["outputs"][0]["facets"] for e in done]
    assert [f.get("lifecycleStateChange", {}).get("lifecycleStateChange") for f in facets] == \
        ["CREATE", "ALTER", None, "TRUNCATE", "ALTER"]
    assert facets[1]["version"]["datasetVersion"] == str(v_alter)
    assert [c["name"] for c in facets[1]["schema"]["fields"]][-1] == "extra"
    assert facets[3]["version"]["datasetVersion"] == str(v_truncate)
    assert facets[4]["version"]["datasetVersion"] == str(v_migrate) and v_migrate > v_truncate
    assert "memo" in [c["name"] for c in facets[4]["schema"]["fields"]]


def test_lineage_endpoints_down_or_slow_never_fail_or_slow_a_write(tmp_path_factory, tmp_path, dedicated_server):
    """OpenLineage over HTTP to a server that answers after a minute, Airflow on a closed port,
    a queue of 2: every write still succeeds promptly, the table is right, warnings are logged,
    no secret is, and the process still stops cleanly."""
    from testkit.server_process import free_port

    slow = AirflowStandIn(delay=60.0).start()
    try:
        base = tmp_path_factory.mktemp("lineage_down")
        env = {
            "OPENLINEAGE__TRANSPORT__TYPE": "http",
            "OPENLINEAGE__TRANSPORT__URL": slow.url,
            "OPENLINEAGE__TRANSPORT__TIMEOUT": "60",
            "OPENLINEAGE__TRANSPORT__AUTH__TYPE": "api_key",
            "OPENLINEAGE__TRANSPORT__AUTH__APIKEY": "ol-secret-key-123",
            "DELTA_LINEAGE_AIRFLOW_URL": f"http://127.0.0.1:{free_port()}",
            "DELTA_LINEAGE_AIRFLOW_TOKEN": "airflow-secret-token-456",
            "DELTA_LINEAGE_QUEUE_SIZE": "2",
        }
        srv = dedicated_server(base / "warehouse", base / "server.log", env=env)
        try:
            stub = srv.stub
            took = []
            start = time.monotonic()
            assert stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=ORDERS), timeout=60).success
            took.append(time.monotonic() - start)
            for i in range(5):
                start = time.monotonic()
                req = write_request("s", ORDERS, replace=[batch_file(tmp_path, ORDERS, rows(i, note=f"n{i}"))])
                assert stub.WriteBatch(req, timeout=60).success
                took.append(time.monotonic() - start)
            assert max(took) < 15, f"a write waited for lineage: {took}"
            assert sorted(r["id"] for r in read_delta_table(f"{srv.warehouse}/s/orders").to_pylist()) == [0, 1, 2, 3, 4]
            assert slow.requests, "the OpenLineage endpoint was called"
            log = srv.log_text()
            assert "OpenLineage: the queue is full" in log
            assert "Airflow asset events: sending failed (ConnectionError)" in log
        finally:
            start = time.monotonic()
            srv.stop()
            stopped_in = time.monotonic() - start
        assert srv.proc.returncode == 0 and stopped_in < 25
        log = (base / "server.log").read_text(errors="replace")
        assert "ol-secret-key-123" not in log and "airflow-secret-token-456" not in log
    finally:
        slow.stop()


def test_history_mode_commits_report_version_and_counts(lineage_server, tmp_path):
    from testkit.fivetran_requests import H, history_request, t, version

    srv, stub = lineage_server, lineage_server.stub
    schema = "hist_lineage"
    location = f"{srv.warehouse}/{schema}/hist"
    before = len(read_events(srv.events_path))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=H)).success
    req = history_request(schema, tmp_path, replace=[version(1, t(1), name="a"), version(2, t(1), name="b")])
    assert stub.WriteHistoryBatch(req).success
    v = delta_version(location)
    events = wait_for(lambda: read_events(srv.events_path), before + 4)[before:]
    assert len(events) == 4 and all(EventValidator().errors(e) == [] for e in events)
    done = events[-1]
    assert done["eventType"] == "COMPLETE"
    assert done["job"]["facets"]["jobType"]["jobType"] == "WRITE_HISTORY_BATCH"
    out = done["outputs"][0]
    assert out["facets"]["version"]["datasetVersion"] == str(v)
    assert out["outputFacets"]["deltaDestination_commit"]["inserted"] == 2
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 2
