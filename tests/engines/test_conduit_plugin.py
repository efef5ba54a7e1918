"""The Conduit connector as a real process, driven the way Conduit drives it (no Go needed):
go-plugin handshake, gRPC health and controller, Specify, Configure/Open/Run/Stop/Teardown,
acks in order after the commit, Stop with records in flight, malformed records, Avro with the
schema service, kill -9 mid-batch and a restart that converges. Tables are read with delta-rs."""
from __future__ import annotations

import datetime as dt
import io
import json
import os
import subprocess
import sys
import time

import fastavro
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from testkit.conduit_records import ENGINE, connector_config, replay
from testkit.conduit_host import CREATE, DELETE, SNAPSHOT, UPDATE, SchemaRegistry, record
from testkit.delta_read import delta_version, rows_by_key


def test_handshake_health_specify_config_validation_and_shutdown(plugin, tmp_path):
    p = plugin()
    hs = p.handshake
    assert (hs.core_version, hs.app_version, hs.network, hs.protocol) == (1, 2, "tcp", "grpc")
    assert hs.address.startswith("127.0.0.1:")
    assert p.handshake_seconds < 30
    health = health_pb2_grpc.HealthStub(p.channel)
    assert health.Check(health_pb2.HealthCheckRequest(service="plugin"), timeout=5).status == \
        health_pb2.HealthCheckResponse.SERVING

    spec = p.specify()
    assert (spec.name, spec.version) == ("delta-lake", "v0.1.0")
    params = spec.destination_params
    assert {"warehouse", "engine", "spark_remote", "schema", "table", "key.column", "key.fields",
            "sdk.batch.size", "sdk.batch.delay"} <= set(params)
    assert [v.type for v in params["warehouse"].validations] == [1]          # REQUIRED
    assert params["sdk.batch.delay"].type == 6                               # DURATION

    for bad, words in (({}, "'warehouse' is required"),
                       ({"warehouse": str(tmp_path), "tabel": "x"}, "unknown setting(s): tabel"),
                       ({"warehouse": str(tmp_path), "sdk.batch.size": "many"}, "integer"),
                       ({"warehouse": str(tmp_path), "sdk.batch.delay": "5 parsecs"}, "duration"),
                       ({"warehouse": str(tmp_path), "engine": "duckdb"}, "must be one of"),
                       ({"warehouse": str(tmp_path), "table": "../escape"}, "path separator")):
        with pytest.raises(grpc.RpcError) as err:
            p.configure(bad)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert words in err.value.details()
    # sdk.* settings of other middleware are tolerated; Configure + Teardown is Conduit's config check.
    p.configure(connector_config(tmp_path / "wh", **{"sdk.schema.extract.type": "avro"}))
    p.teardown()
    took = p.kill_gracefully()
    assert p.proc.returncode == 0 and took < 2.0, took
    assert p.proc.stdout.read() == b""          # the handshake was the only stdout line
    # stderr is hclog JSON, which go-plugin re-logs at each line's level inside Conduit's log.
    lines = [json.loads(line) for line in p.log_text().splitlines() if line.strip()]
    assert all(set(x) >= {"@level", "@message"} for x in lines)
    assert lines[-1]["@message"] == "shutting down"


def test_not_started_by_conduit_prints_no_handshake(tmp_path):
    out = subprocess.run([sys.executable, "-m", "delta_destination.doors.conduit.main"], capture_output=True,
                         env={"PATH": os.environ["PATH"]}, timeout=60)
    assert out.returncode == 1 and out.stdout == b""
    assert b"Conduit connector plugin" in out.stderr


def test_stream_acks_in_order_after_commit_and_table_equals_replay(plugin, tmp_path):
    wh = tmp_path / "wh"
    p = plugin()
    run = p.open(connector_config(wh, **{"sdk.batch.size": 6, "sdk.batch.delay": "300ms"}))
    meta = {"opencdc.collection": "users"}
    recs, events = [], []

    def add(op, key, after=None, raw_after=None):
        pos = len(recs) + 1
        payload = raw_after if raw_after is not None else after
        recs.append(record(pos, op, key=key, after=payload, metadata=meta))
        k = (key["id"],) if isinstance(key, dict) else (key.decode(),)
        row = json.loads(raw_after) if raw_after is not None else after
        events.append(("delete" if op == DELETE else "upsert", k, None if op == DELETE else {**(row or {})}))

    for i in range(1, 13):
        add(SNAPSHOT if i <= 4 else CREATE, {"id": i}, {"id": i, "name": f"user{i}", "active": i % 2 == 0})
    add(UPDATE, {"id": 3}, {"id": 3, "name": "renamed", "active": True})
    add(DELETE, {"id": 5})
    add(UPDATE, {"id": 7}, raw_after=json.dumps({"id": 7, "name": "raw json", "active": False, "score": 1.5}).encode())
    add(CREATE, {"id": 20}, {"id": 20, "name": "new field", "active": True, "email": "x@example.com"})
    add(DELETE, {"id": 20})
    add(CREATE, {"id": 20}, {"id": 20, "name": "again"})
    add(UPDATE, {"id": 2}, {"id": 2, "score": 2})
    run.send(*recs)
    acks = run.wait_acks(len(recs))
    assert [a.position for a in acks] == [r.position for r in recs]
    assert [a.error for a in acks] == [""] * len(recs)
    # Every ack came after its commit: the table already holds what was acked.
    p.stop(recs[-1].position)
    run.close()
    p.teardown()
    took = p.kill_gracefully()
    assert took < 2.0, took                     # go-plugin would SIGKILL after 2 s
    print(f"exit after Shutdown with the engine running: {took:.2f}s")

    path = wh / "conduit" / "users"
    got = rows_by_key(path, ["id"])
    want = replay(events)
    assert set(got) == set(want)
    for k, row in want.items():
        expect = {"id": None, "name": None, "active": None, "score": None, "email": None, **row}
        # id 20 was deleted then created again in one batch: fields it does not name are NULL.
        assert {c: got[k][c] for c in expect} == {c: (float(v) if c == "score" and v is not None else v)
                                                  for c, v in expect.items()}, k
    from testkit.delta_read import read_delta_table
    schema = read_delta_table(str(path)).schema
    assert str(schema.field("id").type) == "int64" and str(schema.field("score").type) == "double"
    assert str(schema.field("active").type) == "bool"
    # Batches of at most 6 records: far fewer commits than records.
    assert delta_version(str(path)) < len(recs)


def test_stop_flushes_records_still_in_flight(plugin, tmp_path):
    wh = tmp_path / "wh"
    p = plugin()
    # A batch this large with no delay is only written when Stop asks for it.
    run = p.open(connector_config(wh, table="fixed", **{"sdk.batch.size": 1000, "sdk.batch.delay": "0"}))
    recs = [record(f"p{i}", CREATE, key=f"k{i}".encode(), after={"n": i}) for i in range(7)]
    run.send(*recs)
    time.sleep(1.0)
    assert run.acks == []                       # nothing acked before it is written
    start = time.monotonic()
    p.stop(recs[-1].position)                   # may race the stream: Stop waits for the last record
    # When Stop returns, the acks are on their way (Conduit waits for them before Teardown).
    acks = run.wait_acks(len(recs), timeout=10)
    assert [a.position for a in acks] == [r.position for r in recs]
    assert all(a.error == "" for a in acks)
    assert time.monotonic() - start < 120
    run.close()
    p.teardown()
    got = rows_by_key(wh / "conduit" / "fixed", ["key"])
    assert {k: r["n"] for k, r in got.items()} == {(f"k{i}",): i for i in range(7)}


def test_malformed_records_are_nacked_alone_in_order(plugin, tmp_path):
    wh = tmp_path / "wh"
    p = plugin()
    run = p.open(connector_config(wh, **{"sdk.batch.size": 100, "sdk.batch.delay": "200ms"}))
    meta = {"opencdc.collection": "items"}
    recs = [
        record(1, CREATE, key={"id": 1}, after={"id": 1, "qty": 5}, metadata=meta),
        record(2, CREATE, key={"id": 2}, after=b"not json {", metadata=meta),
        record(3, CREATE, key={"id": 3}, after={"id": 3, "qty": "five"}, metadata=meta),
        record(4, CREATE, key={"id": 4}, after={"id": 4, "qty": 4}, metadata={"opencdc.collection": "../x"}),
        record(5, CREATE, after={"id": 5, "qty": 5}, metadata=meta),
        record(6, 0, key={"id": 6}, after={"id": 6}, metadata=meta),
        record(7, CREATE, key={"id": 7}, after={"id": 7, "qty": 7}),
        record(8, CREATE, key={"sku": "a"}, after={"qty": 8}, metadata=meta),
        record(9, UPDATE, key={"id": 1}, after={"id": 1, "qty": 6}, metadata=meta),
        # A table the engine cannot read (a corrupt log): its records fail together, the rest is written.
        record(10, CREATE, key={"id": 1}, after={"id": 1}, metadata={"opencdc.collection": "blocked"}),
        record(11, CREATE, key={"id": 2}, after={"id": 2}, metadata={"opencdc.collection": "blocked"}),
    ]
    (wh / "conduit").mkdir(parents=True)
    corrupt = wh / "conduit" / "blocked" / "_delta_log" / ("0" * 20 + ".json")
    corrupt.parent.mkdir(parents=True)
    corrupt.write_text("not a Delta commit")
    run.send(*recs)
    acks = run.wait_acks(len(recs))
    p.stop(recs[-1].position)
    run.close()
    p.teardown()
    assert [a.position for a in acks] == [r.position for r in recs]
    errors = [a.error for a in acks]
    assert errors[0] == "" and errors[8] == ""
    assert "neither JSON nor Avro" in errors[1]
    assert "STRING value where the column is LONG" in errors[2]
    assert "path separator" in errors[3]
    assert "no key" in errors[4]
    assert "operation 0" in errors[5]
    assert "opencdc.collection" in errors[6]
    assert "key field(s) 'sku' differ" in errors[7]
    assert errors[9] and errors[9] == errors[10] and "blocked" in errors[9]
    assert all("five" not in e for e in errors)          # never a value in a message
    assert [f.name for f in corrupt.parent.iterdir()] == [corrupt.name] and corrupt.read_text() == "not a Delta commit"
    got = rows_by_key(wh / "conduit" / "items", ["id"])
    assert {k: r["qty"] for k, r in got.items()} == {(1,): 6}


def test_avro_payloads_decoded_with_the_schema_service(plugin, tmp_path):
    registry = SchemaRegistry()
    schema = {"type": "record", "name": "users", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
        {"name": "active", "type": "boolean"},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}}]}
    registry.add("users.payload", 1, schema)
    parsed = fastavro.parse_schema(schema)

    def avro(v):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, v)
        return buf.getvalue()

    wh = tmp_path / "wh"
    p = plugin(schema_port=registry.port)
    try:
        run = p.open(connector_config(wh, **{"sdk.batch.delay": "100ms"}))
        meta = {"opencdc.collection": "users", "opencdc.payload.schema.subject": "users.payload",
                "opencdc.payload.schema.version": "1"}
        seen = dt.datetime(2026, 11, 24, 12, 30, 1, 123456, tzinfo=dt.timezone.utc)
        recs = [record(i, CREATE, key=f"w{i}".encode(),
                       after=avro({"id": i, "name": f"n{i}", "active": True, "seen": seen, "tags": ["a", "b"]}),
                       metadata=meta) for i in range(1, 4)]
        recs.append(record(4, UPDATE, key=b"w2", after=avro({"id": 2, "name": "changed", "active": False,
                                                                 "seen": seen, "tags": []}), metadata=meta))
        recs.append(record(5, CREATE, key=b"w9", after=b"\xff\xff\xff", metadata=meta))
        run.send(*recs)
        acks = run.wait_acks(len(recs))
        p.stop(recs[-1].position)
        run.close()
        p.teardown()
    finally:
        registry.stop()
    assert [a.error for a in acks[:4]] == [""] * 4
    assert "not valid Avro" in acks[4].error
    assert registry.calls == 1                          # fetched once, then cached
    got = rows_by_key(wh / "conduit" / "users", ["key"])
    assert set(got) == {("w1",), ("w2",), ("w3",)}
    assert got[("w2",)]["name"] == "changed" and got[("w2",)]["active"] is False
    assert got[("w1",)]["seen"] == seen and json.loads(got[("w1",)]["tags"]) == ["a", "b"]


def test_kill9_mid_batch_then_restart_converges(plugin, tmp_path):
    wh = tmp_path / "wh"
    cfg = connector_config(wh, table="events", **{"sdk.batch.size": 10, "sdk.batch.delay": "0"})
    recs, events = [], []
    for i in range(60):
        k = i % 17
        if i % 7 == 6:
            recs.append(record(i + 1, DELETE, key={"k": k}))
            events.append(("delete", (k,), None))
        else:
            recs.append(record(i + 1, UPDATE if i > 17 else CREATE, key={"k": k}, after={"k": k, "v": i}))
            events.append(("upsert", (k,), {"k": k, "v": i}))
    p1 = plugin()
    run = p1.open(cfg)
    run.send(*recs)
    acked = run.wait_acks(1)
    p1.kill9()                                 # batches still being written or waiting
    acked = len(run.acks)
    assert acked < len(recs)
    # Conduit restarts the connector and sends again everything after the last ack.
    p2 = plugin()
    run2 = p2.open(cfg)
    rest = recs[acked:]
    run2.send(*rest)
    acks = run2.wait_acks(len(rest))
    p2.stop(rest[-1].position)
    run2.close()
    p2.teardown()
    assert [a.position for a in acks] == [r.position for r in rest] and all(a.error == "" for a in acks)
    got = rows_by_key(wh / "conduit" / "events", ["k"])
    assert {k: r["v"] for k, r in got.items()} == {k: r["v"] for k, r in replay(events).items()}


def test_stop_racing_the_stream_waits_for_the_last_record(plugin, tmp_path):
    wh = tmp_path / "wh"
    p = plugin()
    run = p.open(connector_config(wh, table="race", **{"sdk.batch.size": 8, "sdk.batch.delay": "0"}))
    recs = [record(i, CREATE, key={"id": i}, after={"id": i, "v": f"x{i}"}) for i in range(1, 51)]
    run.send(*recs)
    p.stop(recs[-1].position)          # sent at once: the plugin may not have read the stream yet
    acks = run.wait_acks(len(recs), timeout=10)
    assert [a.position for a in acks] == [r.position for r in recs] and all(a.error == "" for a in acks)
    run.close()
    p.teardown()
    assert sorted(k[0] for k in rows_by_key(wh / "conduit" / "race", ["id"])) == list(range(1, 51))


def test_a_stream_of_small_batches_keeps_its_engine_without_churn_or_warning(plugin, tmp_path):
    """A few hundred ~5-record commits on one keyed table, as a Conduit pipeline sends them: the
    engine's bound is derived from its own size once warm (docs/conduit.md), so the engine is replaced
    at most once (a healthy engine: at most once per 500 requests) and the log holds no warning; the
    metrics endpoint counts what happened, and the table equals the stream replayed. With the former
    fixed bound of 256 MiB the engine was replaced every ~20 requests, each time with a warning."""
    from bench.common.door_measures import restarts, scrape
    from testkit.server_process import free_port

    wh, port = tmp_path / "wh", free_port()
    batches, per, keys = 250, 5, 300
    recs, events = [], []
    for i in range(1, batches * per + 1):
        k = (i * 7919) % keys
        if i % 9 == 0:
            recs.append(record(i, DELETE, key={"id": k}))
            events.append(("delete", (k,), None))
        else:
            row = {"id": k, "name": f"n{i}", "amount": i}
            recs.append(record(i, CREATE if i <= keys else UPDATE, key={"id": k}, after=row,
                               metadata={"opencdc.collection": "events"}))
            events.append(("upsert", (k,), row))
    p = plugin()
    run = p.open(connector_config(wh, table="events", metrics_port=f"127.0.0.1:{port}",
                                  **{"sdk.batch.size": per, "sdk.batch.delay": "0"}))
    run.send_lazily(recs)                    # the writer takes them `per` at a time: one commit each
    acks = run.wait_acks(len(recs), timeout=600)
    assert [a.position for a in acks] == [r.position for r in recs] and all(a.error == "" for a in acks)
    metrics = scrape(port)
    p.stop(recs[-1].position)
    run.close()
    p.teardown()
    p.kill_gracefully()

    commits = delta_version(str(wh / "conduit" / "events"))
    assert commits >= batches                # one commit per batch (and a few compactions)
    assert {k: r["amount"] for k, r in rows_by_key(wh / "conduit" / "events", ["id"]).items()} == \
        {k: r["amount"] for k, r in replay(events).items()}
    lines = [json.loads(line) for line in p.log_text().splitlines() if line.strip()]
    warm = [x["@message"] for x in lines if " is warm after " in x["@message"]]
    assert warm and "its memory bound is" in warm[0], warm          # the bound came from the engine itself
    replaced = [x["@message"] for x in lines if "replaced by pid" in x["@message"]]
    assert len(replaced) <= 1, replaced
    assert [x for x in lines if x["@level"] in ("warn", "error")] == []
    assert restarts(metrics).get("memory", 0) == len(replaced), (restarts(metrics), replaced)
    assert metrics.get("delta_destination_engine_early_replacements_total{engine=sail}", 0) == 0
    assert metrics["delta_destination_engine_memory_bound_bytes{engine=sail}"] > 0
    print(f"{commits} commits: {warm[0]}; replaced {len(replaced)} times {replaced}")
