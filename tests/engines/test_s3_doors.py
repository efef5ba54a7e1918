"""The doors and commands of a user on a real S3 warehouse (SeaweedFS, tools/s3_server.py):
real processes, tables read back with delta-rs, no mocks.

- Airbyte: one `write` on both engines, the bucket's settings as the config's `s3_*` keys and
  none in the process environment (the settings route: on Sail the door starts a Sail child with
  them, on Spark they become per-bucket Hadoop options); append_dedup with an update and a CDC
  delete over committed rows. The secret never shows on stdout or stderr.
- Conduit: one pipeline run on both engines through the Go-free host (testkit/conduit_host.py),
  the settings as connector parameters; creates, updates and deletes acked, the table equals
  the replay.
- `maintain` on Spark (the session's JVM) on a table of several small commits on S3: OPTIMIZE
  is in the table's history and the rows are unchanged.
- `make run WAREHOUSE=s3://...` serves and the tester client passes; nothing of the
  destination's own (staging, probe, trash) is left under the warehouse.
"""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from deltalake import DeltaTable

from testkit.airbyte_cli import COMMAND, Result, record, stream, stream_state, write_json
from testkit.fivetran_requests import batch_file, col, table, write_request
from testkit.conduit_host import CREATE, DELETE, UPDATE, PluginProcess
from testkit.conduit_host import record as cdc_record
from testkit.delta_read import read_delta_table, storage_options_for
from testkit.server_process import ROOT, TESTER_INPUTS
from delta_destination.doors.fivetran._proto import common_pb2, destination_sdk_pb2 as pb
from delta_destination.private_areas import PROBE_PREFIX, STAGING_DIR, TRASH_DIR

BOTH = pytest.mark.parametrize("engine_name", ["sail", "spark"])


def s3_settings(s3) -> dict:
    """The bucket's settings as the settings schema spells them (doors' configurations)."""
    return {"s3_endpoint": s3.endpoint_url, "s3_region": s3.region, "s3_access_key_id": s3.access_key_id,
            "s3_secret_access_key": s3.secret_access_key}


def without_aws(environ=os.environ) -> dict:
    """This process's environment with no AWS_* variable: settings must come from the config."""
    return {k: v for k, v in environ.items() if not k.startswith("AWS_")}


def fresh_warehouse(s3, name: str) -> tuple[str, str]:
    """(s3 URL, key prefix) of a warehouse no other test uses."""
    prefix = f"{name}-{uuid.uuid4().hex[:8]}/wh"
    return s3.url(prefix), prefix


def private_keys(s3, prefix: str) -> list[str]:
    """Objects of the destination's own under the warehouse: staged batches, probes, trash notes."""
    return [k for k in s3.list_keys(prefix + "/")
            if k[len(prefix) + 1:].startswith((STAGING_DIR, TRASH_DIR, PROBE_PREFIX))]


def by_id(rows, *cols) -> dict:
    return {r["id"]: tuple(r[c] for c in cols) for r in rows}


# ---- Airbyte ------------------------------------------------------------------------------------
DEDUP = {"id": {"type": "integer"}, "v": {"type": "string"}, "cur": {"type": "integer"},
         "_ab_cdc_deleted_at": {"type": ["null", "string"], "format": "date-time"}}


@BOTH
def test_airbyte_sync_on_s3_with_settings_from_the_config(tmp_path, s3_server, door_process, engine_name):
    warehouse, prefix = fresh_warehouse(s3_server, f"airbyte-{engine_name}")
    config = write_json(tmp_path / "config.json", {
        "warehouse": warehouse, "engine": engine_name, **door_process(engine_name), **s3_settings(s3_server),
        "flush_interval_seconds": 0})   # each STATE commits: the second commit merges into rows on S3
    catalog = write_json(tmp_path / "catalog.json", {"streams": [
        stream("users", DEDUP, "append_dedup", pk=["id"], cursor="cur", generation=1, minimum=0)]})
    lines = [
        record("users", {"id": 1, "v": "a", "cur": 1}),
        record("users", {"id": 2, "v": "b", "cur": 1}),
        record("users", {"id": 3, "v": "c", "cur": 1}),
        stream_state("users", {"n": 1}),
        record("users", {"id": 1, "v": "a2", "cur": 2}),                                      # update
        record("users", {"id": 2, "v": "b", "cur": 2, "_ab_cdc_deleted_at": "2024-01-01T00:00:00Z"}),  # delete
        record("users", {"id": 4, "v": "d", "cur": 1}),                                       # insert
        stream_state("users", {"n": 2}),
    ]
    data = "".join(line + "\n" for line in lines).encode()
    p = subprocess.run(COMMAND + ["write", "--config", config, "--catalog", catalog], input=data,
                       capture_output=True, cwd=ROOT, timeout=300, env=without_aws())
    r = Result(p.returncode, p.stdout.decode().splitlines(), p.stderr.decode(errors="replace"))
    assert r.rc == 0, r.stderr[-3000:]
    assert [s["destinationStats"] for s in r.states] == [{"recordCount": 3.0}, {"recordCount": 3.0}]
    secret = s3_server.secret_access_key
    assert secret not in p.stdout.decode(errors="replace") and secret not in r.stderr

    location = f"{warehouse}/airbyte/users"
    assert location.startswith("s3://")
    assert by_id(read_delta_table(location).to_pylist(), "v", "cur") == {1: ("a2", 2), 3: ("c", 1), 4: ("d", 1)}
    assert len(DeltaTable(location, storage_options=storage_options_for(location)).history()) >= 2
    assert private_keys(s3_server, prefix) == []


# ---- Conduit ------------------------------------------------------------------------------------
@BOTH
def test_conduit_pipeline_on_s3_with_settings_as_parameters(tmp_path, s3_server, door_process, engine_name):
    warehouse, prefix = fresh_warehouse(s3_server, f"conduit-{engine_name}")
    # The host starts the plugin with a clean environment (as go-plugin does): no AWS_* variable.
    config = {"warehouse": warehouse, "engine": engine_name, **door_process(engine_name), **s3_settings(s3_server),
              "sdk.batch.size": "10", "sdk.batch.delay": "200ms"}
    meta = {"opencdc.collection": "users"}
    p = PluginProcess(tmp_path / "plugin.log")
    try:
        assert not any(k.startswith("AWS_") for k in open(f"/proc/{p.proc.pid}/environ").read().split("\0"))
        run = p.open(config)
        first = [cdc_record(i, CREATE, key={"id": i}, after={"id": i, "name": f"user{i}"}, metadata=meta)
                 for i in range(1, 5)]
        run.send(*first)
        assert len(run.wait_acks(len(first))) == len(first)   # committed: the next records change rows on S3
        second = [cdc_record(5, UPDATE, key={"id": 2}, after={"id": 2, "name": "renamed"}, metadata=meta),
                  cdc_record(6, DELETE, key={"id": 3}, metadata=meta),
                  cdc_record(7, CREATE, key={"id": 9}, after={"id": 9, "name": "new"}, metadata=meta)]
        run.send(*second)
        acks = run.wait_acks(len(first) + len(second))
        recs = first + second
        assert [a.position for a in acks] == [r.position for r in recs]
        assert [a.error for a in acks] == [""] * len(recs)
        p.stop(recs[-1].position)
        run.close()
        p.teardown()
        p.kill_gracefully()
    finally:
        p.close()
    assert s3_server.secret_access_key not in p.log_text()

    location = f"{warehouse}/conduit/users"
    got = by_id(read_delta_table(location).to_pylist(), "name")
    assert got == {1: ("user1",), 2: ("renamed",), 4: ("user4",), 9: ("new",)}
    assert len(DeltaTable(location, storage_options=storage_options_for(location)).history()) >= 2
    assert private_keys(s3_server, prefix) == []


# ---- maintain -----------------------------------------------------------------------------------
EVENTS = table("events", col("id", "INT", pk=True), col("v", "STRING"))


def test_maintain_compacts_a_table_on_s3_on_spark(tmp_path, s3_server, dedicated_server, shared_spark):
    """Several small commits written by a Spark destination on S3, then `maintain` as a cron job
    runs it: the bucket's settings from the standard AWS variables, the session's Spark JVM."""
    warehouse, _ = fresh_warehouse(s3_server, "maintain")
    srv = dedicated_server(warehouse, tmp_path / "server.log", engine="spark", env=s3_server.env())
    assert srv.stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=EVENTS)).success
    for b in range(3):   # three commits of one small file each
        rows = [{"id": b * 10 + i, "v": f"v{b}-{i}"} for i in range(10)]
        assert srv.stub.WriteBatch(write_request("s", EVENTS, replace=[batch_file(tmp_path, EVENTS, rows)])).success
    srv.stop()
    location = f"{warehouse}/s/events"
    options = storage_options_for(location)
    before = sorted(read_delta_table(location).to_pylist(), key=lambda x: x["id"])
    assert [x["id"] for x in before] == list(range(30))
    files_before = len(DeltaTable(location, storage_options=options).file_uris())

    r = subprocess.run([sys.executable, "-m", "delta_destination.doors.fivetran.main", "maintain", "--warehouse", warehouse,
                        "--schema", "s", "--table", "events", "--engine", "spark", "--spark-remote", shared_spark.url],
                       cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**without_aws(), **s3_server.env()})
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "done: compact, purge_deletion_vectors, vacuum" in r.stdout
    assert s3_server.secret_access_key not in r.stdout + r.stderr
    dt = DeltaTable(location, storage_options=options)
    assert "OPTIMIZE" in [h["operation"] for h in dt.history()]
    assert len(dt.file_uris()) < files_before
    assert sorted(read_delta_table(location).to_pylist(), key=lambda x: x["id"]) == before


# ---- make run -----------------------------------------------------------------------------------
def test_make_run_on_s3_serves_and_passes_the_tester_client(tmp_path, s3_server, dedicated_server):
    """`make run WAREHOUSE=s3://...` with the bucket's settings in the standard AWS variables, as a
    user would start it; the tester client (another process, same variables) reads the tables back."""
    warehouse, prefix = fresh_warehouse(s3_server, "make-run")
    env = s3_server.env()
    server = dedicated_server(warehouse, tmp_path / "server.log", env=env,
                              launcher=lambda port: ["make", "--no-print-directory", "run", f"PORT={port}",
                                                     f"WAREHOUSE={warehouse}"])
    try:
        client = subprocess.run(
            [sys.executable, "-m", "testkit.tester", "--port", str(server.port), "--warehouse", warehouse,
             "--input", str(TESTER_INPUTS / "input.json"), "--schema", "tester"],
            cwd=ROOT, capture_output=True, text=True, timeout=1200, env={**without_aws(), **env})
        assert client.returncode == 0, client.stdout[-4000:] + client.stderr[-2000:]
        assert "RESULT: OK" in client.stdout
        # The setup form's tests, as Fivetran runs them before a first sync: the probe goes too.
        for name in ("spark_engine", "warehouse_writable"):
            t = server.stub.Test(common_pb2.TestRequest(name=name, configuration={}), timeout=300)
            assert t.WhichOneof("response") == "success", t.failure
        log = server.log_text()
        assert f"destination ready: warehouse {warehouse}, engine auto (embedded Sail" in log, log[-3000:]
    finally:
        server.stop()
    assert s3_server.secret_access_key not in (tmp_path / "server.log").read_text()
    tables = {k[len(prefix) + 1:].split("/")[1] for k in s3_server.list_keys(f"{prefix}/tester/")
              if "/_delta_log/" in k}
    assert tables >= {"transaction", "campaign"}, tables
    for name in tables:
        read_delta_table(f"{warehouse}/tester/{name}")          # each one a Delta table delta-rs reads
    assert private_keys(s3_server, prefix) == []
