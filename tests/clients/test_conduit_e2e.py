"""The real client: Conduit itself (built by scripts/build_conduit.sh, cached in .tools/) runs
a pipeline from its builtin generator into our connector, with its builtin file destination
beside it as the oracle of the exact stream. The Delta table must equal the stream replayed."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from pathlib import Path

import pytest

from testkit.conduit_records import ENGINE
from testkit.delta_read import rows_by_key
from testkit.conduit_pipeline import Conduit as ConduitRun, conduit_binary, replay_oracle

ROOT = Path(__file__).resolve().parents[2]
RECORDS = 200

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def conduit_bin() -> str:
    return conduit_binary()


def Conduit(binary: str, work: Path, yaml_text: str, **kwargs) -> ConduitRun:
    """Conduit on the engine under test (testkit.conduit_records.ENGINE)."""
    return ConduitRun(binary, work, yaml_text, engine=ENGINE, **kwargs)


def pipeline_yaml(avro: bool, dst_settings: dict) -> str:
    extract = "" if avro else """
          sdk.schema.extract.payload.enabled: "false"
          sdk.schema.extract.key.enabled: "false\""""
    extra_fields = """
          collections.users.format.options.at: time""" if avro else ""
    settings = "".join(f'\n          {k}: "{v}"' for k, v in dst_settings.items())
    return f"""version: "2.2"
pipelines:
  - id: gen-to-delta
    status: running
    connectors:
      - id: src
        type: source
        plugin: builtin:generator
        settings:
          collections.users.format.type: structured
          collections.users.format.options.id: int
          collections.users.format.options.name: string
          collections.users.format.options.active: bool{extra_fields}
          collections.users.operations: create,update,delete,snapshot
          collections.orders.format.type: structured
          collections.orders.format.options.amount: int
          collections.orders.format.options.note: string
          collections.orders.operations: create,update,delete
          recordCount: "{RECORDS}"
          rate: "400"{extract}
      - id: dst
        type: destination
        plugin: standalone:delta-lake@v0.1.0
        settings:{settings}
      - id: oracle
        type: destination
        plugin: builtin:file
        settings:
          path: ${{WORK}}/oracle.jsonl
"""


def assert_stopped_cleanly(code: int, log: str) -> None:
    """Conduit exited 0 after its SIGINT, with no forced exit, stray ack or nack in its log."""
    assert code == 0, log[-4000:]
    for bad in ("failed to exit gracefully", "unexpected ack", "nack"):
        assert bad not in log


@pytest.mark.parametrize("avro", [False, True], ids=["structured", "avro"])
def test_generator_pipeline_lands_the_oracle_stream(conduit_bin, tmp_path, avro):
    version = subprocess.run([conduit_bin, "version"], capture_output=True, text=True, timeout=30).stdout
    assert version.split()[0] in ("v0.19.0", "v0.18.0", "v0.14.0"), version   # see scripts/build_conduit.sh
    settings = {"warehouse": "${DELTA_ROOT}", "engine": "${DELTA_ENGINE}", "sdk.batch.size": 50,
                "sdk.batch.delay": "500ms"}
    c = Conduit(conduit_bin, tmp_path, pipeline_yaml(avro, settings))
    try:
        c.wait_for(RECORDS)
    finally:
        code = c.interrupt()
    log = c.log()
    assert_stopped_cleanly(code, log)
    inits = [json.loads(x) for x in log.splitlines()
             if x.startswith("{") and "standalone connector plugins initialized" in x]
    assert [x["count"] for x in inits] == [1]

    lines = c.oracle_lines()
    assert len(lines) == RECORDS and {r["operation"] for r in lines} == {"create", "update", "delete", "snapshot"}
    # Every collection becomes its own table (opencdc.collection names it).
    if avro:
        assert all("opencdc.payload.schema.subject" in r["metadata"] for r in lines if r["payload"]["after"])
    by_table = {t: [r for r in lines if r["metadata"]["opencdc.collection"] == t] for t in ("users", "orders")}
    assert by_table["users"] and by_table["orders"] and sum(map(len, by_table.values())) == RECORDS
    orders = {k[0]: row for k, row in rows_by_key(tmp_path / "wh" / "conduit" / "orders", ["key"]).items()}
    want_orders = replay_oracle(by_table["orders"])
    assert set(orders) == set(want_orders)
    for key, row in want_orders.items():
        assert orders[key]["note"] == row["note"]
        assert orders[key]["amount"] == (row["amount"] if avro else float(row["amount"]))
    want = replay_oracle(by_table["users"])
    got = {k[0]: row for k, row in rows_by_key(tmp_path / "wh" / "conduit" / "users", ["key"]).items()}
    assert set(got) == set(want)
    for key, row in want.items():
        assert got[key]["name"] == row["name"] and got[key]["active"] == row["active"]
        if avro:
            assert got[key]["id"] == row["id"]        # Avro long: exact int64
            assert got[key]["at"] == dt.datetime.fromisoformat(row["at"].replace("Z", "+00:00"))
        else:
            assert got[key]["id"] == float(row["id"])  # a Struct number is a float64 (documented)


def test_missing_required_setting_stops_conduit_quickly(conduit_bin, tmp_path):
    c = Conduit(conduit_bin, tmp_path, pipeline_yaml(False, {"sdk.batch.size": 50}))
    try:
        code = c.proc.wait(90)
    finally:
        c.close()
    assert code != 0
    assert "setting 'warehouse' is required" in c.log()


FILE_LINES = 30_000
FILE_KEYS = 1_000


def file_pipeline_yaml(dst_settings: dict | None = None) -> str:
    """builtin:file source (a position per line, so a restarted Conduit resumes after the last
    position it persisted) into the connector; each line is a raw JSON payload whose `id` is
    the key. `dst_settings`: the connector's settings (default: the local warehouse and engine)."""
    dst = dst_settings or {"warehouse": "${DELTA_ROOT}", "engine": "${DELTA_ENGINE}"}
    dst = {**dst, "table": "events", "key.fields": "id", "sdk.batch.size": "200", "sdk.batch.delay": "100ms"}
    settings = "".join(f'\n          {k}: "{v}"' for k, v in dst.items())
    return f"""version: "2.2"
pipelines:
  - id: file-to-delta
    status: running
    connectors:
      - id: src
        type: source
        plugin: builtin:file
        settings:
          path: ${{WORK}}/input.jsonl
      - id: dst
        type: destination
        plugin: standalone:delta-lake@v0.1.0
        settings:{settings}
"""


def test_kill9_of_conduit_mid_pipeline_orphan_exits_and_restart_converges(conduit_bin, tmp_path):
    """kill -9 of Conduit while records stream: the connector (now an orphan) exits within 10 s
    and commits nothing after Conduit died; a restarted Conduit (same database) re-sends what
    was not acked and the table converges: every key holds its last value, none an older one."""
    from testkit.delta_read import commit_history
    from testkit.processes import process_state, wait_state
    from testkit.delta_read import delta_version

    with open(tmp_path / "input.jsonl", "w") as f:
        for i in range(1, FILE_LINES + 1):
            f.write(json.dumps({"id": i % FILE_KEYS, "v": i}) + "\n")
    want = {(i % FILE_KEYS,): i for i in range(FILE_LINES - FILE_KEYS + 1, FILE_LINES + 1)}
    db = ("--db.type", "sqlite", "--db.sqlite.path", str(tmp_path / "conduit.db"))
    first = Conduit(conduit_bin, tmp_path, file_pipeline_yaml(), db=db)
    try:
        connector = first.connector_pid()
        deadline = time.monotonic() + 300
        while first.acked() < 3_000:
            assert time.monotonic() < deadline and first.proc.poll() is None, first.log()[-4000:]
            time.sleep(0.2)
        first.proc.kill()                              # kill -9 of Conduit only, not of its children
        first.proc.wait()
        dead_at = time.time()
    finally:
        first.close()
    acked = first.acked()
    took = wait_state(connector, "gone", 10.0)
    print(f"the orphaned connector exited {took:.3f}s after Conduit's kill -9 ({acked} records acked)")
    path = tmp_path / "wh" / "conduit" / "events"
    assert not [h for h in commit_history(path) if h["timestamp"] > dead_at * 1000 + 50]
    version = delta_version(str(path))
    assert acked < FILE_LINES

    second = Conduit(conduit_bin, tmp_path, "", db=db, run=2)
    try:
        assert delta_version(str(path)) >= version
        deadline = time.monotonic() + 600
        while True:
            assert second.proc.poll() is None, second.log()[-4000:]
            got = {k: r["v"] for k, r in rows_by_key(path, ["id"]).items()}
            if got == want:
                break
            assert time.monotonic() < deadline, f"not converged: {sum(got.get(k) == v for k, v in want.items())} keys"
            time.sleep(2.0)
        code = second.interrupt()
    finally:
        second.close()
    log = second.log()
    assert_stopped_cleanly(code, log)
    assert process_state(connector) == "gone"


def test_a_pipeline_lands_through_the_cluster(conduit_bin, cluster, tmp_path):
    """The Conduit door with the settings a user of the cluster gives it (the Connect URL, the S3
    warehouse, the metastore): a file of changes to 200 keys lands with every key at its last value,
    read by delta-rs from the bucket, and the table is registered for another session to find by name."""
    from tools.local_cluster import another_session_sees
    from testkit.delta_read import read_delta_table

    assert cluster.s3 is not None, "the cluster tests need its S3 warehouse"
    lines, keys = 1_000, 200
    with open(tmp_path / "input.jsonl", "w") as f:
        for i in range(1, lines + 1):
            f.write(json.dumps({"id": i % keys, "v": i}) + "\n")
    want = {i % keys: i for i in range(lines - keys + 1, lines + 1)}
    env = cluster.env()
    settings = {**cluster.destination_settings(), "schema": "cluster_conduit"}
    c = Conduit(conduit_bin, tmp_path, file_pipeline_yaml(settings))
    location = f"{env['WAREHOUSE']}/cluster_conduit/events"
    storage = cluster.s3.storage_options()
    try:
        deadline = time.monotonic() + 600
        while c.acked() < lines:
            assert time.monotonic() < deadline and c.proc.poll() is None, c.log()[-4000:]
            time.sleep(1.0)
    finally:
        code = c.interrupt()
    log = c.log()
    assert_stopped_cleanly(code, log)
    got = {r["id"]: r["v"] for r in read_delta_table(location, storage).to_pylist()}
    assert got == want
    seen = another_session_sees(env["SPARK_REMOTE"], "cluster_conduit")
    assert "events" in seen["tables"], seen
