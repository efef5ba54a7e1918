"""Lineage from the Fivetran door: a real server process configured the client's standard ways
(OPENLINEAGE__TRANSPORT__* -> file transport; DELTA_LINEAGE_AIRFLOW_* -> a loopback Airflow
stand-in), real CreateTable/WriteBatch with real encrypted batch files, events validated
offline against the OpenLineage JSON Schemas, versions checked against the Delta log."""
from __future__ import annotations

import json
import time

import grpc
import pytest

from batch_helpers import batch_file, write_request
from rpc_helpers import col, expect_error, table
from delta_destination.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.lineage import table_uri
from testkit.airflow_standin import AirflowStandIn
from testkit.delta_read import delta_version, read_delta_table
from testkit.openlineage_check import EventValidator, read_events, runs
from testkit.server_process import RunningServer

ORDERS = table("orders", col("id", "INT", pk=True), col("amount", "DECIMAL", precision=10, scale=2),
               col("note", "STRING"), col("_fivetran_synced", "UTC_DATETIME"))
SYNCED = "2024-05-01T12:00:00.000Z"


def rows(*ids, note="n"):
    return [{"id": i, "amount": "1.50", "note": note, "_fivetran_synced": SYNCED} for i in ids]


def wait_for(items, count, timeout=20.0):
    """items() once it holds at least `count` entries (lineage is sent in the background)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = items()
        if len(got) >= count:
            return got
        time.sleep(0.1)
    return items()


@pytest.fixture(scope="module")
def airflow_standin():
    standin = AirflowStandIn().start()
    yield standin
    standin.stop()


@pytest.fixture(scope="module")
def lineage_server(tmp_path_factory, airflow_standin):
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
    srv = RunningServer(base / "warehouse", base / "server.log", env=env)
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
