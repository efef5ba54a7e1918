"""The local cluster itself (tools/local_cluster): a Spark standalone master and two workers, a
Spark Connect server on them, the warehouse storage (SeaweedFS S3 when installed, else a shared
directory) and a Hive 4.0.1 metastore. Everything real: JVMs, the metastore's Thrift service,
Delta tables read back with delta-rs, the application UI's REST API.

Then the destination itself on the cluster, one server process started as a user would (the
`destination` fixture): Fivetran's tester input, a batch staged on S3 and read by both
executors, its tables by name from another session, kill -9 of the destination and of a worker
in the middle of a batch.

The session-scoped `cluster` fixture starts the cluster in this process (not through make) and
stops it at the end; the last test stops it itself to prove nothing is left behind.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from tools.local_cluster import (
    LocalCluster,
    another_session_sees,
    completed_tasks_by_executor,
    read_env,
)
from testkit.polling import Poller
from testkit.processes import jvms_below, process_tree, processes_mentioning, running

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark(cluster):
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(cluster.spark_remote).getOrCreate()
    yield session
    if cluster.parts["connect"].alive():  # a client of a stopped server would retry for minutes
        session.stop()


def delta_rows(cluster: LocalCluster, location: str):
    """The table read by delta-rs straight from storage: no Spark, no catalog."""
    options = cluster.s3.storage_options() if cluster.s3 is not None else None
    uri = location.replace("s3a://", "s3://")
    dt = DeltaTable(uri, storage_options=options)
    got = pa.table(QueryBuilder().register("t", dt).execute("SELECT count(*) AS n, sum(id) AS s FROM t").read_all())
    return got.to_pylist()[0]


def second_session(cluster: LocalCluster, *args: str) -> dict:
    return another_session_sees(cluster.spark_remote, *args)


def listening_addresses(pid: int) -> set[str]:
    """Where the process `pid` and its descendants listen. A descendant that ends during the walk
    (e.g. spark-class's launcher step of an executor being started) is skipped; `pid` itself must live."""
    addrs = set()
    for p in process_tree(pid):
        try:
            conns = p.net_connections(kind="inet")
        except psutil.NoSuchProcess:   # (a zombie is one too)
            if p.pid == pid:
                raise
            continue
        addrs.update(c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN)
    return addrs


def test_every_part_runs_and_listens_on_loopback_only(cluster):
    pids = cluster.pids()
    assert {"metastore", "master", "worker1", "worker2", "connect"} <= set(pids)
    for name, pid in pids.items():
        assert running(pid), name
        addrs = listening_addresses(pid)
        assert addrs, f"{name} listens nowhere"
        assert addrs <= {"127.0.0.1", "::ffff:127.0.0.1"}, f"{name} listens on {addrs}"
    # Two executors, one per worker, each a JVM of its own under its worker.
    for worker in ("worker1", "worker2"):
        children = jvms_below(pids[worker], "CoarseGrainedExecutorBackend")
        assert len(children) == 1, (worker, children)


def test_env_file_is_private_and_complete(cluster):
    env_file = cluster.state_dir / "env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    env = read_env(cluster.state_dir)
    assert env["SPARK_REMOTE"] == cluster.spark_remote
    assert env["CATALOG_URI"].startswith("thrift://127.0.0.1:")
    assert env["SPARK_UI"].startswith("http://127.0.0.1:")
    if cluster.s3 is not None:
        assert env["WAREHOUSE"].startswith("s3://")
        for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
            assert env[key], key
    else:
        assert env["WAREHOUSE"].startswith("file:///")


def test_a_second_start_says_a_cluster_runs(cluster):
    out = subprocess.run([sys.executable, "-m", "tools.local_cluster", "start", "--state-dir", str(cluster.state_dir)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "already running" in out.stdout
    assert f"SPARK_REMOTE={cluster.spark_remote}" in out.stdout
    assert "AWS_SECRET_ACCESS_KEY=<hidden>" in out.stdout or cluster.s3 is None
    if cluster.s3 is not None:
        assert cluster.s3.secret_access_key not in out.stdout + out.stderr
    assert all(running(pid) for pid in cluster.pids().values())


def test_delta_table_written_by_executors_registered_and_read_by_name_elsewhere(cluster, spark):
    before = cluster.completed_tasks_by_worker()
    location = f"{cluster.warehouse.replace('s3://', 's3a://')}/infra_sales/orders"
    spark.sql("CREATE DATABASE IF NOT EXISTS infra_sales")
    spark.sql(f"CREATE TABLE infra_sales.orders USING delta LOCATION '{location}' AS "
              "SELECT id, concat('o', CAST(id AS STRING)) AS label FROM range(0, 20000, 1, 4)")
    after = cluster.completed_tasks_by_worker()
    # The write's tasks ran on both workers' executors (the driver runs none on a cluster).
    assert all(after[w] > before[w] for w in ("worker1", "worker2")), (before, after)

    # The table is a Delta table at its location, readable without Spark.
    assert delta_rows(cluster, location) == {"n": 20000, "s": sum(range(20000))}
    # ... registered in the metastore as an external Delta table at that location.
    detail = {r.col_name: r.data_type for r in spark.sql("DESCRIBE TABLE EXTENDED infra_sales.orders").collect()}
    assert detail["Type"] == "EXTERNAL" and detail["Provider"] == "delta"
    assert detail["Location"].rstrip("/").endswith("infra_sales/orders")

    # Another process, another session: finds it by name.
    seen = second_session(cluster, "infra_sales", "infra_sales.orders")
    assert seen["tables"] == ["orders"]
    assert seen["rows"] == [20000, sum(range(20000)), "o0"]
    assert seen["session"] != spark.session_id


def test_rename_and_drop_keep_the_catalog_and_the_data(cluster, spark):
    location = f"{cluster.warehouse.replace('s3://', 's3a://')}/infra_moves/t"
    spark.sql("CREATE DATABASE IF NOT EXISTS infra_moves")
    spark.sql(f"CREATE TABLE infra_moves.t USING delta LOCATION '{location}' AS SELECT id, 'x' AS label FROM range(10)")
    spark.sql("ALTER TABLE infra_moves.t RENAME TO infra_moves.t_renamed")
    assert second_session(cluster, "infra_moves", "infra_moves.t_renamed")["rows"] == [10, 45, "x"]
    assert second_session(cluster, "infra_moves")["tables"] == ["t_renamed"]
    # An external table's rename moves the name only; its data stays where it was.
    assert delta_rows(cluster, location) == {"n": 10, "s": 45}

    spark.sql("DROP TABLE infra_moves.t_renamed")
    assert second_session(cluster, "infra_moves")["tables"] == []
    # Dropping an external table keeps its files: it can be registered again.
    assert delta_rows(cluster, location) == {"n": 10, "s": 45}
    spark.sql(f"CREATE TABLE infra_moves.again USING delta LOCATION '{location}'")
    assert second_session(cluster, "infra_moves", "infra_moves.again")["rows"] == [10, 45, "x"]


def test_names_the_catalog_takes_and_refuses(cluster, spark):
    """The session catalog (Spark's rule, before the metastore) takes letters, digits and `_`
    only, and both lower-case: the metastore keeps `Mixed_Case` as `mixed_case`."""
    base = cluster.warehouse.replace("s3://", "s3a://")
    spark.sql("CREATE DATABASE IF NOT EXISTS infra_names")
    spark.sql(f"CREATE TABLE infra_names.Mixed_Case_1 USING delta LOCATION '{base}/infra_names/m' AS SELECT 1 AS id")
    assert second_session(cluster, "infra_names")["tables"] == ["mixed_case_1"]
    from pyspark.errors import AnalysisException

    # Registering an existing Delta table (the destination writes by path, then names it).
    spark.range(1).write.format("delta").save(f"{base}/infra_names/existing")
    for bad in ("`with space`", "`dash-ed`", "`t_é`", "`dot.ted`"):
        with pytest.raises(AnalysisException, match="INVALID_SCHEMA_OR_RELATION_NAME"):
            spark.sql(f"CREATE TABLE infra_names.{bad} USING delta LOCATION '{base}/infra_names/existing'")
    assert second_session(cluster, "infra_names")["tables"] == ["mixed_case_1"]


def test_completed_tasks_are_counted_per_executor_and_worker(cluster, spark):
    spark.sql("SELECT count(*) FROM range(0, 100000, 1, 6)").collect()
    per_executor = completed_tasks_by_executor(cluster.env()["SPARK_UI"])
    assert len(per_executor) == 2 and all(n > 0 for n in per_executor.values()), per_executor
    per_worker = cluster.completed_tasks_by_worker()
    assert set(per_worker) == {"worker1", "worker2"}
    assert sum(per_worker.values()) == sum(per_executor.values())


# ---- the destination itself on the cluster ---------------------------------------------------------------
# One destination server process, started as a user would: `--engine spark --spark-remote
# $SPARK_REMOTE --warehouse $WAREHOUSE --catalog-uri $CATALOG_URI` with the cluster's AWS_*
# variables in its environment. A batch over STAGE_LIMIT bytes of Arrow is staged on S3 (the
# tester inputs' batches are far below it and travel as Spark Connect local relations).
# These tests come after the ones counting exactly two executors (the worker crash adds one)
# and before test_stop_leaves_no_process, which must stay last.

STAGE_LIMIT = 64 * 1024
DEST_SCHEMA = "cluster_dest"
STAGED_ROWS = 20000
CHANGED_ROWS = 6000   # a crash test's batch: staged too (~160 KB of Arrow)


class Destination:
    """The destination process of these tests; `restart()` starts a new one (after a kill -9)."""

    def __init__(self, cluster: LocalCluster, log_dir: Path):
        self.cluster = cluster
        self.log_dir = log_dir
        env = cluster.env()
        self.warehouse = env["WAREHOUSE"]
        self.env = {**{k: v for k, v in env.items() if k.startswith("AWS_")},
                    "FIVETRAN_DELTA_LOCAL_RELATION_LIMIT": str(STAGE_LIMIT)}
        self.args = ("--engine", "spark", "--spark-remote", env["SPARK_REMOTE"], "--catalog-uri", env["CATALOG_URI"])
        # Passed explicitly, never registered globally: another session S3 server may use the same bucket name.
        self.storage_options = cluster.s3.storage_options()
        self.starts = 0
        self.server = None

    def start(self):
        from testkit.server_process import RunningServer

        self.starts += 1
        self.server = RunningServer(self.warehouse, self.log_dir / f"destination-{self.starts}.log", self.args,
                                    env=self.env, ready_timeout=420)
        self.server.storage_options = self.storage_options
        return self.server

    def restart(self):
        self.server.stop(signal.SIGKILL)   # reaps a killed one; kills one that is still running
        return self.start()

    @property
    def stub(self):
        return self.server.stub

    def location(self, schema: str, table: str) -> str:
        from delta_destination.core.table_dirs import table_location
        from testkit.tester import warehouse_of

        return table_location(warehouse_of(self.warehouse, self.storage_options), schema, table)

    def rows(self, schema: str, table: str) -> dict:
        from testkit.delta_read import read_delta_table

        got = read_delta_table(self.location(schema, table), self.storage_options).to_pylist()
        return {r["id"]: (r["label"], r["n"]) for r in got}


@pytest.fixture(scope="module")
def destination(cluster, tmp_path_factory):
    if cluster.s3 is None:
        pytest.skip("the destination tests need the cluster's S3 warehouse (SeaweedFS and the S3A jars)")
    began = time.monotonic()
    dest = Destination(cluster, tmp_path_factory.mktemp("destination"))
    dest.start()
    print(f"\ndestination on the cluster ready in {time.monotonic() - began:.1f}s", flush=True)
    yield dest
    # With the cluster stopped (test_stop_leaves_no_process), a graceful stop would wait on a
    # Spark Connect client retrying a dead server; the process has no child to leave behind.
    dest.server.stop(None if cluster.parts["connect"].alive() else signal.SIGKILL)


def private_keys(cluster: LocalCluster) -> list[str]:
    """Objects of the destination's private areas (staged batches, probes, trash) in the bucket."""
    from delta_destination.private_areas import PROBE_PREFIX, STAGING_DIR, TRASH_DIR
    from tools.local_cluster import WAREHOUSE_PREFIX

    return [k for k in cluster.s3.list_keys(f"{WAREHOUSE_PREFIX}/")
            if k[len(WAREHOUSE_PREFIX) + 1:].startswith((STAGING_DIR, TRASH_DIR, PROBE_PREFIX))]


def staged_keys(cluster: LocalCluster) -> list[str]:
    from delta_destination.private_areas import STAGING_DIR
    from tools.local_cluster import WAREHOUSE_PREFIX

    return cluster.s3.list_keys(f"{WAREHOUSE_PREFIX}/{STAGING_DIR}/")


class StagingWatch(Poller):
    """Lists the staging area every 0.2 s while a request runs: what was staged, and when first."""

    def __init__(self, cluster: LocalCluster):
        super().__init__(0.2)
        self.cluster = cluster
        self.seen: set[str] = set()
        self.first = threading.Event()

    def poll(self):
        try:
            keys = staged_keys(self.cluster)
        except Exception:  # noqa: BLE001 - a listing racing a delete: try again
            keys = []
        if keys:
            self.seen.update(keys)
            self.first.set()


def app_json(cluster: LocalCluster, path: str):
    from tools.local_cluster import http_json

    return http_json(f"{cluster.spark_ui}/api/v1/applications/{cluster.app_id}/{path}", timeout=30)


def wait_quiet(cluster: LocalCluster, timeout: float = 420.0) -> None:
    """Until the application runs no SQL execution and no job (three times in a row, 1 s apart).
    A statement a killed client sent keeps running in the Connect server, and may still commit
    (measured: the dead destination's MERGE committed after the restart; the replay met it as a
    concurrent append and retried)."""
    deadline = time.monotonic() + timeout
    quiet = 0
    while quiet < 3:
        busy = app_json(cluster, "jobs?status=running") or [
            q for q in app_json(cluster, "sql?details=false&length=100000") if q.get("status") == "RUNNING"]
        quiet = 0 if busy else quiet + 1
        assert time.monotonic() < deadline, "the cluster still runs statements"
        time.sleep(1)


def write_labels(tmp_path, table_proto, ids, label: str, *, delete=()):
    from testkit.fivetran_requests import batch_file, write_request

    rows = [{"id": i, "label": label, "n": -i} for i in ids]
    return write_request(DEST_SCHEMA, table_proto, replace=[batch_file(tmp_path, table_proto, rows)],
                         delete=[batch_file(tmp_path, table_proto, [{"id": i} for i in delete], kind="delete")] if delete else ())


def staged_table():
    from testkit.fivetran_requests import col, table

    return table("staged", col("id", "LONG", pk=True), col("label", "STRING"), col("n", "LONG"))


def history_tables_only(spec: dict) -> dict:
    """A tester input reduced to its history-mode tables (their steps only): its live tables run
    in the live variant already."""
    keep = {n for n, t in spec["create_table"].items() if t.get("history_mode")}
    ops = []
    for step in spec.get("ops") or []:
        kept = {}
        for op, payload in step.items():
            payload = {n: v for n, v in payload.items() if n in keep} if isinstance(payload, dict) \
                else [n for n in payload if n in keep]
            if payload:
                kept[op] = payload
        if kept:
            ops.append(kept)
    return {**spec, "create_table": {n: t for n, t in spec["create_table"].items() if n in keep},
            "alter_table": {n: t for n, t in (spec.get("alter_table") or {}).items() if n in keep},
            "ops": ops, "describe_table": [n for n in spec.get("describe_table") or [] if n in keep]}


def test_destination_passes_tester_inputs_on_the_cluster(cluster, destination):
    """Fivetran's public tester input through the destination on the cluster, two runs at once
    (each its own schema): input.json with every table live, and its history-mode table in
    history mode (WriteHistoryBatch). Every table is read back by delta-rs from S3 and compared
    with the reference model; no private object of the destination is left behind."""
    from concurrent.futures import ThreadPoolExecutor

    from delta_destination.doors.fivetran.batch_files import Compression
    from testkit import tester as tc
    from testkit.server_process import TESTER_INPUTS

    spec = tc.load_input(TESTER_INPUTS / "input.json")
    runs = {"live": (spec, True), "history": (history_tables_only(spec), False)}
    assert runs["history"][0]["create_table"] and runs["history"][0]["ops"]
    logs: dict[str, list[str]] = {name: [] for name in runs}
    took: dict[str, float] = {}

    def run(name):
        began = time.monotonic()
        what, live_only = runs[name]
        try:
            return tc.run_spec(destination.stub, destination.warehouse, what, f"cluster_tester_{name}",
                               log=logs[name].append, storage_options=destination.storage_options,
                               live_only=live_only, compression=Compression.ZSTD, plain_text=False)
        finally:
            took[name] = round(time.monotonic() - began, 1)

    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(runs, pool.map(run, runs)))
    print(f"\ninput.json on the cluster, both runs at once: {took}", flush=True)
    for name, result in results.items():
        assert result.ok, f"{name}:\n" + "\n".join(logs[name][-40:] + result.problems)
        assert sum(len(t["rows"]) for t in result.tables.values()) > 0, name
    assert set(results["live"].tables) == set(spec["create_table"])
    history = results["history"].tables
    assert history and all(any(c[0] == "_fivetran_start" for c in t["columns"]) for t in history.values())
    assert private_keys(cluster) == []


def test_destination_stages_a_big_batch_on_s3_for_both_executors(cluster, destination, tmp_path):
    """A WriteBatch over the local-relation limit: pyarrow writes it as Parquet under
    `_fivetran_staging/` on S3 and the executors read it from there (the SQL plans the
    application ran name that S3 location; no file is shared with the driver), the tasks run on
    both workers' executors, the table holds every row, and the staged objects are gone."""
    from testkit.fivetran_requests import batch_file, write_request
    from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb

    t = staged_table()
    assert destination.stub.CreateTable(pb.CreateTableRequest(schema_name=DEST_SCHEMA, table=t), timeout=600).success
    rows = [{"id": i, "label": f"r{i:06d}", "n": i} for i in range(STAGED_ROWS)]
    request = write_request(DEST_SCHEMA, t, replace=[batch_file(tmp_path, t, rows)])
    tasks_before = completed_tasks_by_executor(cluster.spark_ui, cluster.app_id)
    last_sql = max((q["id"] for q in app_json(cluster, "sql?details=false&length=100000")), default=-1)
    began = time.monotonic()
    with StagingWatch(cluster) as watch:
        assert destination.stub.WriteBatch(request, timeout=600).success
    print(f"\nstaged batch of {STAGED_ROWS} rows on the cluster: {time.monotonic() - began:.1f}s", flush=True)

    assert destination.rows(DEST_SCHEMA, "staged") == {r["id"]: (r["label"], r["n"]) for r in rows}
    # Staged on S3 as Parquet parts (several: the batch is ~9x the limit), removed after.
    assert watch.seen and all(k.endswith(".parquet") for k in watch.seen), watch.seen
    folders = {k.rsplit("/", 1)[0] for k in watch.seen}
    assert len(folders) == 1 and len(watch.seen) >= 4, watch.seen
    assert staged_keys(cluster) == [] and private_keys(cluster) == []
    # ... and read by the engine from that S3 location.
    staged = "s3a://" + f"{cluster.s3.url()}".split("://", 1)[1].rstrip("/") + "/" + folders.pop()
    plans = [q.get("planDescription", "") for q in app_json(cluster, "sql?details=true&planDescription=true&length=100000")
             if q["id"] > last_sql]
    assert any(staged in p for p in plans), (staged, [p[:300] for p in plans])
    # The work ran on both workers' executors.
    tasks_after = completed_tasks_by_executor(cluster.spark_ui, cluster.app_id)
    where = cluster.executor_workers()
    grew = {where.get(e, e): n - tasks_before.get(e, 0) for e, n in tasks_after.items() if n > tasks_before.get(e, 0)}
    assert {"worker1", "worker2"} <= set(grew), (tasks_before, tasks_after, where)


def test_the_hive_catalog_registers_describes_renames_and_drops_through_the_router(cluster, spark):
    """core/catalogs/hive.py against the cluster's metastore, its engine work through the router's
    catalog lease: what it registers another session finds by name, describe gives the location,
    a rename and a drop move or remove the name only, and no entry describes as None."""
    from delta_destination.core.catalogs import catalog_for
    from delta_destination.engines.pool import EnginePool
    from delta_destination.engines.router import EngineRouter
    from delta_destination.settings import Settings

    if cluster.s3 is None:
        pytest.skip("the cluster's S3 warehouse is needed (SeaweedFS and the S3A jars)")
    settings = Settings.create(**cluster.destination_settings())
    location = f"{cluster.warehouse}/infra_hive/t"
    spark.range(3).write.format("delta").save(location.replace("s3://", "s3a://"))
    pool = EnginePool()
    try:
        hive = catalog_for(settings, EngineRouter(pool))
        hive.check("infra_hive", "T_1")
        hive.register("infra_hive", "T_1", location)
        assert hive.describe("infra_hive", "T_1").rstrip("/").endswith("infra_hive/t")
        assert second_session(cluster, "infra_hive")["tables"] == ["t_1"]
        hive.rename("infra_hive", "t_1", "t_2", location)
        assert hive.describe("infra_hive", "t_1") is None
        assert second_session(cluster, "infra_hive")["tables"] == ["t_2"]
        hive.drop("infra_hive", "t_2")
        assert hive.describe("infra_hive", "t_2") is None and hive.describe("infra_no_such_db", "t") is None
        assert delta_rows(cluster, location) == {"n": 3, "s": 3}   # the data stays
    finally:
        pool.stop()


def test_destination_tables_are_visible_by_name_from_another_session(cluster, destination):
    """The table the destination created is in the metastore: another process's Spark Connect
    session finds it by name, with every row."""
    seen = second_session(cluster, DEST_SCHEMA, f"{DEST_SCHEMA}.staged")
    assert "staged" in seen["tables"]
    assert seen["rows"] == [STAGED_ROWS, sum(range(STAGED_ROWS)), "r000000"]


def test_kill_9_of_the_destination_mid_batch(cluster, destination, tmp_path):
    """The destination is killed (SIGKILL) while a staged batch is under way and started again:
    the table is exactly before or after the request (once the query the dead client left in the
    Connect server has ended), the restart removed what was staged, the replay converges."""
    t = staged_table()
    before = destination.rows(DEST_SCHEMA, "staged")
    request = write_labels(tmp_path, t, range(1000, 1000 + CHANGED_ROWS), "crashed", delete=[19999])
    after = {**before, **{i: ("crashed", -i) for i in range(1000, 1000 + CHANGED_ROWS)}}
    after.pop(19999)
    answers: list = []
    server = destination.server
    with StagingWatch(cluster) as watch:
        caller = threading.Thread(target=lambda: answers.append(call(server.stub.WriteBatch, request)))
        caller.start()
        assert watch.first.wait(300) or answers, "the batch was never staged"
        # Killed while the cluster runs the request's statement (else, after 60 s, anyway).
        deadline = time.monotonic() + 60
        while not answers and time.monotonic() < deadline and not app_json(cluster, "jobs?status=running"):
            time.sleep(0.05)
        server.stop(signal.SIGKILL)
        caller.join(120)
    killed_mid_batch = not answers or answers[0] is not True
    began = time.monotonic()
    destination.restart()
    print(f"\ndestination restarted in {time.monotonic() - began:.1f}s (killed mid-batch: {killed_mid_batch})", flush=True)
    wait_quiet(cluster)
    got = destination.rows(DEST_SCHEMA, "staged")
    assert got in (before, after), "neither before nor after"
    print(f"the table after the kill: {'after' if got == after else 'before'} the request", flush=True)
    if answers and answers[0] is True:
        assert got == after
    assert staged_keys(cluster) == []   # the restart removed what the dead process staged
    assert destination.stub.WriteBatch(request, timeout=600).success
    assert destination.rows(DEST_SCHEMA, "staged") == after
    assert private_keys(cluster) == []


def test_kill_9_of_a_worker_mid_batch(cluster, destination, tmp_path):
    """A worker JVM and its executor (one machine of the cluster) are killed (SIGKILL) while that
    executor runs a task of a staged batch: the request completes on the other executor or fails
    cleanly; the table is before or after; a replay converges; the worker is started again and
    the master gives it an executor. The last destination test: the executor count changes here."""
    t = staged_table()
    before = destination.rows(DEST_SCHEMA, "staged")
    request = write_labels(tmp_path, t, range(5000, 5000 + CHANGED_ROWS), "worker-lost", delete=[19998])
    after = {**before, **{i: ("worker-lost", -i) for i in range(5000, 5000 + CHANGED_ROWS)}}
    after.pop(19998)
    worker = cluster.parts["worker1"]
    answers: list = []
    with StagingWatch(cluster) as watch:
        caller = threading.Thread(target=lambda: answers.append(call(destination.stub.WriteBatch, request)))
        caller.start()
        assert watch.first.wait(300) or answers, "the batch was never staged"
        # Killed while its executor runs a task of the request (else, after 120 s, anyway).
        mine = {e for e, w in cluster.executor_workers().items() if w == "worker1"}
        deadline = time.monotonic() + 120
        mid_task = False
        while not answers and time.monotonic() < deadline and not mid_task:
            mid_task = any(e["id"] in mine and e.get("activeTasks", 0) > 0 for e in app_json(cluster, "executors"))
            time.sleep(0.05)
        os.killpg(worker.proc.pid, signal.SIGKILL)   # the worker and the executor it started
        killed_at = time.monotonic()
        caller.join(900)
    assert answers, "no answer within 15 minutes of the worker's loss"
    print(f"\nworker1 killed (mid-task: {mid_task}); the request answered {answers[0]!r} "
          f"{time.monotonic() - killed_at:.1f}s later", flush=True)
    assert answers[0] is True or isinstance(answers[0], str)   # success, or a clean error
    wait_quiet(cluster)
    got = destination.rows(DEST_SCHEMA, "staged")
    assert got in (before, after), "neither before nor after"
    if answers[0] is True:
        assert got == after
    # The replay, on the executor left (a new executor would first fetch every jar from the
    # driver, the AWS SDK's among them: minutes on this machine).
    assert destination.stub.WriteBatch(request, timeout=600).success
    assert destination.rows(DEST_SCHEMA, "staged") == after
    assert private_keys(cluster) == []

    began = time.monotonic()
    cluster.restart_worker(1)
    print(f"worker1 back with an executor in {time.monotonic() - began:.1f}s", flush=True)
    executors = app_json(cluster, "allexecutors")
    where = cluster.executor_workers()
    active = {where.get(e["id"]) for e in executors if e["id"] != "driver" and e.get("isActive")}
    # The lost executor stays listed (inactive, with its counts); a new one runs on the new worker1.
    assert len(executors) >= 4 and active == {"worker1", "worker2"}, (executors, where)


def call(method, request):
    """True on success; the error text on a failed answer (success=false or a gRPC error)."""
    import grpc

    try:
        resp = method(request, timeout=900)
    except grpc.RpcError as exc:
        return f"{exc.code().name}: {exc.details()}"
    return True if resp.success else f"success=false: {resp}"


AIRBYTE_SCHEMA = "cluster_airbyte"


def test_an_airbyte_sync_lands_through_the_cluster(cluster, tmp_path):
    """The Airbyte door with the settings a user of the cluster gives it (the Connect URL, the S3
    warehouse, the metastore): two real `write` runs over pipes, the second an upsert with a CDC
    delete; the table is read by delta-rs from the bucket and by name from another session."""
    from testkit.airbyte_cli import record, run, stream, stream_state, write_json

    assert cluster.s3 is not None, "the cluster tests need its S3 warehouse"
    env = cluster.env()
    config = write_json(tmp_path / "config.json", cluster.destination_settings())
    props = {"id": {"type": "integer"}, "label": {"type": "string"}, "cur": {"type": "integer"},
             "_ab_cdc_deleted_at": {"type": ["null", "string"], "format": "date-time"}}
    catalog = write_json(tmp_path / "catalog.json", {"streams": [
        stream("orders", props, "append_dedup", pk=["id"], cursor="cur", namespace=AIRBYTE_SCHEMA)]})
    first = [record("orders", {"id": i, "label": f"a{i:03d}", "cur": 1}, namespace=AIRBYTE_SCHEMA) for i in range(100)]
    done = run(["write", "--config", config, "--catalog", catalog], [*first, stream_state("orders", {"n": 1})],
               timeout=600)
    assert done.rc == 0 and len(done.states) == 1, done.stderr[-3000:]
    second = [record("orders", {"id": i, "label": f"b{i:03d}", "cur": 2}, namespace=AIRBYTE_SCHEMA)
              for i in range(90, 110)]
    second.append(record("orders", {"id": 0, "label": "gone", "cur": 3, "_ab_cdc_deleted_at": "2026-01-01T00:00:00Z"},
                         namespace=AIRBYTE_SCHEMA))
    done = run(["write", "--config", config, "--catalog", catalog], [*second, stream_state("orders", {"n": 2})],
               timeout=600)
    assert done.rc == 0 and len(done.states) == 1, done.stderr[-3000:]
    ids = set(range(1, 110))
    location = f"{env['WAREHOUSE']}/{AIRBYTE_SCHEMA}/orders"
    assert delta_rows(cluster, location) == {"n": len(ids), "s": sum(ids)}
    seen = second_session(cluster, AIRBYTE_SCHEMA, f"{AIRBYTE_SCHEMA}.orders")
    assert "orders" in seen["tables"] and seen["rows"] == [len(ids), sum(ids), "a001"]


# ---- engine auto on the cluster: the embedded engine writes, the cluster registers and takes what is big ----
AUTO_SCHEMA = "cluster_auto"


def auto_destination(cluster: LocalCluster, log_dir: Path, *more: str):
    """A destination as a user of the cluster starts it without naming an engine: auto, with the
    cluster's Connect server as its Apache Spark and its metastore (a budget of 0.505 GB makes any
    MERGE into a table of more than ~0.3 MiB of Parquet one for Spark)."""
    from testkit.server_process import RunningServer

    env = cluster.env()
    args = ("--spark-remote", env["SPARK_REMOTE"], "--catalog-uri", env["CATALOG_URI"], "--memory-budget-gb", "0.505",
            *more)
    srv = RunningServer(env["WAREHOUSE"], log_dir / "auto.log", args, env={k: v for k, v in env.items()
                                                                        if k.startswith("AWS_")}, ready_timeout=420)
    srv.storage_options = cluster.s3.storage_options()
    return srv


def auto_table(name: str):
    from testkit.fivetran_requests import col, table

    return table(name, col("id", "LONG", pk=True), col("label", "STRING"), col("n", "INT"))


def test_auto_on_the_cluster_writes_with_the_embedded_engine_and_moves_only_big_merges(cluster, tmp_path):
    """Engine auto with the cluster's Connect server and metastore: a small table is created (and
    registered by the cluster), loaded and upserted by the embedded engine straight to the bucket;
    an upsert into a table past the memory budget runs on the cluster; both tables are read back by
    delta-rs and by name from another session."""
    from testkit.fivetran_requests import batch_file, write_request
    from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
    from testkit.delta_read import recent_operations

    assert cluster.s3 is not None, "the cluster tests need its S3 warehouse"
    srv = auto_destination(cluster, tmp_path)
    try:
        assert "destination ready" in srv.log_text() and "engine auto (embedded Sail; the Apache Spark server" in srv.log_text()
        for name, rows in (("small", 50), ("big", 60_000)):
            t = auto_table(name)
            srv.stub.CreateTable(pb.CreateTableRequest(schema_name=AUTO_SCHEMA, table=t), timeout=600)
            f = batch_file(tmp_path, t, [{"id": i, "label": f"a{i:06d}", "n": 1} for i in range(rows)])
            srv.stub.WriteBatch(write_request(AUTO_SCHEMA, t, replace=[f]), timeout=600)       # new keys: an append
            f = batch_file(tmp_path, t, [{"id": i, "label": f"b{i:06d}", "n": 2} for i in range(0, rows, 10)])
            srv.stub.WriteBatch(write_request(AUTO_SCHEMA, t, replace=[f]), timeout=600)       # stored keys: a MERGE
        log = srv.log_text()
        served = [line for line in log.splitlines() if "upserts, 0 updates, 0 deletes in one commit" in line]
        assert len(served) == 4, log[-3000:]
        assert all("engine sail" in line for line in served[:3]), served      # small load + upsert, big load
        assert "engine spark" in served[3] and "over the memory budget" in served[3], served[3]
        warehouse = cluster.env()["WAREHOUSE"]
        for name, rows in (("small", 50), ("big", 60_000)):
            location = f"{warehouse}/{AUTO_SCHEMA}/{name}"
            assert delta_rows(cluster, location) == {"n": rows, "s": sum(range(rows))}
            assert recent_operations(location.replace("s3a://", "s3://"), 1, srv.storage_options) == ["MERGE"]
        seen = second_session(cluster, AUTO_SCHEMA, f"{AUTO_SCHEMA}.small")
        assert {"small", "big"} <= set(seen["tables"]) and seen["rows"] == [50, sum(range(50)), "a000001"]
        assert second_session(cluster, AUTO_SCHEMA, f"{AUTO_SCHEMA}.big")["rows"][:2] == [60_000, sum(range(60_000))]
    finally:
        srv.stop()


def test_the_embedded_engine_and_the_cluster_write_one_table_at_once_and_keep_every_commit(cluster, spark, tmp_path):
    """Two writers of one table on S3 at the same time: the destination's embedded engine (auto, small
    upserts) and the cluster (appends of other keys through a Spark Connect session). Both commit with
    put-if-absent (Sail's log store, the project's S3 log store on the cluster): every commit of both
    lands, none is overwritten."""
    from testkit.fivetran_requests import batch_file, write_request
    from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
    from testkit.delta_read import delta_version

    assert cluster.s3 is not None, "the cluster tests need its S3 warehouse"
    srv = auto_destination(cluster, tmp_path)
    t = auto_table("both")
    location = f"{cluster.env()['WAREHOUSE']}/{AUTO_SCHEMA}/both"
    try:
        srv.stub.CreateTable(pb.CreateTableRequest(schema_name=AUTO_SCHEMA, table=t), timeout=600)
        v0 = delta_version(location.replace("s3a://", "s3://"), srv.storage_options)
        errors: list = []

        def destination_writes():
            try:
                for r in range(12):
                    f = batch_file(tmp_path, t, [{"id": r * 10 + i, "label": f"d{r}", "n": r} for i in range(10)])
                    srv.stub.WriteBatch(write_request(AUTO_SCHEMA, t, replace=[f]), timeout=600)
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        writer = threading.Thread(target=destination_writes)
        writer.start()
        for r in range(8):                                   # the cluster appends keys of its own meanwhile
            rows = pa.table({"id": pa.array([100_000 + r * 5 + i for i in range(5)], pa.int64()),
                             "label": [f"c{r}"] * 5, "n": pa.array([r] * 5, pa.int32())})
            spark.createDataFrame(rows).write.format("delta").mode("append").save(location.replace("s3://", "s3a://"))
        writer.join(900)
        assert not errors and not writer.is_alive(), errors
        ids = set(range(120)) | {100_000 + r * 5 + i for r in range(8) for i in range(5)}
        assert delta_rows(cluster, location) == {"n": len(ids), "s": sum(ids)}
        assert delta_version(location.replace("s3a://", "s3://"), srv.storage_options) == v0 + 12 + 8
    finally:
        srv.stop()


def test_stop_leaves_no_process(cluster, spark):
    spark.stop()
    pids = dict(cluster.pids())
    tree = {p.pid for pid in pids.values() for p in process_tree(pid)}
    assert len(tree) >= len(pids) + 2  # the executors are there before
    began = time.monotonic()
    cluster.stop()
    print(f"\ncluster stopped in {time.monotonic() - began:.1f}s", flush=True)
    alive = [pid for pid in tree if running(pid)]
    assert alive == []
    assert processes_mentioning(cluster.state_dir) == []
    assert not (cluster.state_dir / "env").exists()
