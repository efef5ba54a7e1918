"""The real client: Conduit itself (built by scripts/build_conduit.sh, cached in .tools/) runs
a pipeline from its builtin generator into our connector, with its builtin file destination
beside it as the oracle of the exact stream. The Delta table must equal the stream replayed."""
from __future__ import annotations

import base64
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conduit_helpers import ENGINE, table_rows

ROOT = Path(__file__).resolve().parents[1]
RECORDS = 200

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def conduit_bin() -> str:
    out = subprocess.run([str(ROOT / "scripts" / "build_conduit.sh")], capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


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


class Conduit:
    def __init__(self, binary: str, work: Path, yaml_text: str, db: tuple = ("--db.type", "inmemory"),
                 run: int = 1):
        self.work = work
        if run == 1:
            (work / "connectors").mkdir(parents=True)
            (work / "pipelines").mkdir()
            launcher = subprocess.run([sys.executable, "-m", "delta_destination.conduit.main", "install",
                                       str(work / "connectors")], capture_output=True, text=True, cwd=ROOT, check=True)
            assert launcher.stdout.strip() == str(work / "connectors" / "delta-lake")
            (work / "pipelines" / "pipeline.yaml").write_text(yaml_text)
        suffix = "" if run == 1 else f".{run}"
        self.log_path = work / f"conduit{suffix}.log"
        self.progress = work / f"progress{suffix}.json"
        env = {**os.environ, "DELTA_ROOT": str(work / "wh"), "WORK": str(work), "DELTA_ENGINE": ENGINE,
               "CONDUIT_DELTA_PROGRESS_FILE": str(self.progress)}
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, "run", "--pipelines.path", str(work / "pipelines"), "--connectors.path", str(work / "connectors"),
             *db, "--api.enabled=false", "--log.level", "debug", "--log.format", "json",
             "--pipelines.exit-on-degraded=true", "--pipelines.error-recovery.max-retries", "0"],
            cwd=work, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def connector_pid(self, timeout: float = 120.0) -> int:
        """The pid of our connector process (a child of Conduit)."""
        import psutil

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for child in psutil.Process(self.proc.pid).children():
                try:
                    if "delta_destination.conduit.main" in " ".join(child.cmdline()):
                        return child.pid
                except psutil.NoSuchProcess:
                    continue
            time.sleep(0.2)
        raise AssertionError("no connector process under Conduit")

    def oracle_lines(self) -> list[dict]:
        path = self.work / "oracle.jsonl"
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]

    def acked(self) -> int:
        try:
            return json.loads(self.progress.read_text())["acked"]
        except (OSError, ValueError):
            return 0

    def wait_for(self, n: int, timeout: float = 240.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log()[-4000:]
            if len(self.oracle_lines()) >= n and self.acked() >= n:
                return
            time.sleep(0.5)
        raise AssertionError(f"timeout: oracle {len(self.oracle_lines())}, acked {self.acked()}\n{self.log()[-4000:]}")

    def interrupt(self, timeout: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGINT)     # ONE SIGINT: graceful stop (Stop, drain acks, Teardown)
        try:
            return self.proc.wait(timeout)
        finally:
            self.close()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def assert_stopped_cleanly(code: int, log: str) -> None:
    """Conduit exited 0 after its SIGINT, with no forced exit, stray ack or nack in its log."""
    assert code == 0, log[-4000:]
    for bad in ("failed to exit gracefully", "unexpected ack", "nack"):
        assert bad not in log


def replay_oracle(lines: list[dict]) -> dict:
    state: dict = {}
    for r in lines:
        key = base64.b64decode(r["key"]).decode()
        if r["operation"] == "delete":
            state.pop(key, None)
        elif r["operation"] in ("create", "update", "snapshot"):
            state[key] = {**state.get(key, {}), **r["payload"]["after"]}
        else:
            raise AssertionError(r["operation"])
    return state


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
    orders = {k[0]: row for k, row in table_rows(tmp_path / "wh" / "conduit" / "orders", ["key"]).items()}
    want_orders = replay_oracle(by_table["orders"])
    assert set(orders) == set(want_orders)
    for key, row in want_orders.items():
        assert orders[key]["note"] == row["note"]
        assert orders[key]["amount"] == (row["amount"] if avro else float(row["amount"]))
    want = replay_oracle(by_table["users"])
    got = {k[0]: row for k, row in table_rows(tmp_path / "wh" / "conduit" / "users", ["key"]).items()}
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
    from conduit_helpers import commit_history, process_state, wait_state
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
            got = {k: r["v"] for k, r in table_rows(path, ["id"]).items()}
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
    from testkit.cluster import another_session_sees
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
