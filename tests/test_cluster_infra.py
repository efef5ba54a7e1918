"""The local cluster itself (testkit/cluster.py): a Spark standalone master and two workers, a
Spark Connect server on them, the warehouse storage (SeaweedFS S3 when installed, else a shared
directory) and a Hive 4.0.1 metastore. Everything real: JVMs, the metastore's Thrift service,
Delta tables read back with delta-rs, the application UI's REST API.

The session-scoped `cluster` fixture starts the cluster in this process (not through make) and
stops it at the end; the last test stops it itself to prove nothing is left behind.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from testkit.cluster import (
    ClusterOptions,
    LocalCluster,
    completed_tasks_by_executor,
    processes_mentioning,
    read_env,
    tree_rss,
)

ROOT = Path(__file__).resolve().parents[1]
SECOND_SESSION = """
import json, os, sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(os.environ["SPARK_REMOTE"]).getOrCreate()
out = {"session": spark.session_id}
out["tables"] = sorted(r.tableName for r in spark.sql(f"SHOW TABLES IN {sys.argv[1]}").collect())
if len(sys.argv) > 2:
    rows = spark.sql(f"SELECT count(*) AS n, sum(id) AS s, min(label) AS lo FROM {sys.argv[2]}").collect()[0]
    out["rows"] = [rows.n, rows.s, rows.lo]
print(json.dumps(out))
"""


class PeakMemory:
    """Samples the summed RSS of the cluster's process trees every half second."""

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster
        self.peak = 0
        self.peak_parts: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            parts = {name: tree_rss(pid) for name, pid in self.cluster.pids().items()}
            total = sum(parts.values())
            if total > self.peak:
                self.peak, self.peak_parts = total, parts
            self._stop.wait(0.5)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    began = time.monotonic()
    c = LocalCluster(tmp_path_factory.mktemp("cluster") / "state", ClusterOptions())
    c.start()
    figures = {"start_s": round(time.monotonic() - began, 1), "parts_ready_s": {k: round(v, 1) for k, v in c.timings.items()},
               "storage": "s3" if c.s3 is not None else "local"}
    with PeakMemory(c) as mem:
        yield c
    figures["peak_rss_mb"] = round(mem.peak / 2**20)
    figures["peak_rss_parts_mb"] = {k: round(v / 2**20) for k, v in mem.peak_parts.items()}
    figures["session_s"] = round(time.monotonic() - began, 1)
    # The figures the note asks for, in the test log (pytest -s or the junit output show them).
    print("\ncluster figures: " + json.dumps(figures), flush=True)
    c.stop()


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
    """Another process, another Spark Connect session, the same server: what it sees by name."""
    env = {**os.environ, "SPARK_REMOTE": cluster.spark_remote}
    out = subprocess.run([sys.executable, "-c", SECOND_SESSION, *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def listening_addresses(pid: int) -> set[str]:
    addrs = set()
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    for p in procs:
        for conn in p.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                addrs.add(conn.laddr.ip)
    return addrs


def test_every_part_runs_and_listens_on_loopback_only(cluster):
    pids = cluster.pids()
    assert {"metastore", "master", "worker1", "worker2", "connect"} <= set(pids)
    for name, pid in pids.items():
        assert psutil.pid_exists(pid), name
        addrs = listening_addresses(pid)
        assert addrs, f"{name} listens nowhere"
        assert addrs <= {"127.0.0.1", "::ffff:127.0.0.1"}, f"{name} listens on {addrs}"
    # Two executors, one per worker, each a JVM of its own under its worker.
    for worker in ("worker1", "worker2"):
        children = [p for p in psutil.Process(pids[worker]).children(recursive=True) if p.name() == "java"]
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
    out = subprocess.run([sys.executable, "-m", "testkit.cluster", "start", "--state-dir", str(cluster.state_dir)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "already running" in out.stdout
    assert f"SPARK_REMOTE={cluster.spark_remote}" in out.stdout
    assert "AWS_SECRET_ACCESS_KEY=<hidden>" in out.stdout or cluster.s3 is None
    if cluster.s3 is not None:
        assert cluster.s3.secret_access_key not in out.stdout + out.stderr
    assert set(cluster.pids().values()) <= {p.pid for p in psutil.process_iter()}


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


def test_stop_leaves_no_process(cluster, spark):
    spark.stop()
    pids = dict(cluster.pids())
    tree = {p.pid for pid in pids.values() for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]}
    assert len(tree) >= len(pids) + 2  # the executors are there before
    began = time.monotonic()
    cluster.stop()
    print(f"\ncluster stopped in {time.monotonic() - began:.1f}s", flush=True)
    alive = [pid for pid in tree if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    assert processes_mentioning(cluster.state_dir) == []
    assert not (cluster.state_dir / "env").exists()
