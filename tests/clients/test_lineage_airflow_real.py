"""Asset events against a REAL Airflow 3 API server on loopback (slow: Airflow's DB migration,
DAG parsing and server start take about half a minute). The consumer DAGs are declared with the
canonical URIs of the tables; after each commit Airflow holds an event for exactly those assets."""
from __future__ import annotations

import time

import pytest

from testkit.fivetran_requests import batch_file, col, table, write_request
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.lineage import table_uri
from delta_destination.lineage.airflow_assets import AirflowAssets, AirflowConfig
from testkit.airflow_server import RealAirflow
from testkit.delta_read import delta_version
from testkit.server_process import RunningServer

SYNCED = "2024-05-01T12:00:00.000Z"


@pytest.mark.slow
def test_commits_become_asset_events_in_a_real_airflow(tmp_path_factory, tmp_path):
    base = tmp_path_factory.mktemp("real_airflow")
    warehouse = base / "warehouse"
    names = ["orders", "order_items"]
    uris = [table_uri(str(warehouse), "sales", n) for n in names]
    # A spelled name: Airflow's lookup (uri_pattern) is an ILIKE, where _ and % are wildcards.
    encoded = table_uri(str(warehouse), "sales", "order items")
    assert encoded.endswith("/sales/order=20items")  # the on-disk spelling of "order items"
    airflow = RealAirflow(base, uris + [encoded]).start()
    try:
        assets = {a["uri"]: a["id"] for a in airflow.get("/api/v2/assets")["assets"]}
        assert set(assets) == set(uris + [encoded])
        client = AirflowAssets(AirflowConfig(url=airflow.url, username=airflow.username, password=airflow.password))
        assert client.asset_ids(encoded) == [assets[encoded]]
        assert client.asset_ids(uris[0]) == [assets[uris[0]]], "orders must not also match order_items"
        env = {"DELTA_LINEAGE_AIRFLOW_URL": airflow.url, "DELTA_LINEAGE_AIRFLOW_USERNAME": airflow.username,
               "DELTA_LINEAGE_AIRFLOW_PASSWORD": airflow.password}
        srv = RunningServer(warehouse, base / "server.log", env=env)
        try:
            versions = {}
            for name in names:
                t = table(name, col("id", "INT", pk=True), col("_fivetran_synced", "UTC_DATETIME"))
                assert srv.stub.CreateTable(pb.CreateTableRequest(schema_name="sales", table=t)).success
                rows = [{"id": i, "_fivetran_synced": SYNCED} for i in (1, 2)]
                assert srv.stub.WriteBatch(write_request("sales", t, replace=[batch_file(tmp_path, t, rows)])).success
                versions[name] = delta_version(f"{warehouse}/sales/{name}")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                events = airflow.get("/api/v2/assets/events")["asset_events"]
                if len(events) >= 4:
                    break
                time.sleep(0.5)
            assert len(events) == 4, events
            assert not any(e["asset_id"] == assets[encoded] for e in events)
            for name, uri in zip(names, uris):
                mine = [e for e in events if e["asset_id"] == assets[uri]]
                assert [e["extra"]["operation"] for e in mine] == ["CreateTable", "WriteBatch"]
                assert mine[-1]["extra"]["delta_version"] == versions[name]
                assert mine[-1]["extra"]["inserted"] == 2 and mine[-1]["extra"]["from_rest_api"] is True
                assert all(e["uri"] == uri for e in mine)
        finally:
            srv.stop()
    finally:
        airflow.stop()
