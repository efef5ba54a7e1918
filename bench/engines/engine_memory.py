"""Where a long-running destination's memory goes, per statement and per commit.

    .venv/bin/python -m bench.engines.engine_memory sail      # a process running only Sail: KiB kept per statement kind
    .venv/bin/python -m bench.engines.engine_memory door      # the door's own Python objects (tracemalloc) over many commits

`sail` starts Sail's Spark Connect server alone in a child process (nothing of the destination in
it) and runs N statements of one kind at a time from a Spark Connect client, reading the server's
PSS before and after each kind; the same with Sail's Parquet caches off, to tell statement memory
from cache memory. `door` runs the core in this process against a supervised Sail process (with
its recycling off), many small upserts into a few tables, and compares tracemalloc snapshots after
a warm-up and at the end: what our own Python objects and the Spark Connect client keep per
commit, with the top growing allocation sites. Results: docs/engine-memory.md quotes them.
"""
from __future__ import annotations

import argparse
import gc
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import psutil
import pyarrow as pa

MIB = 2**20
CACHES_OFF = {"SAIL_PARQUET__FILE_METADATA_CACHE__TYPE": "none", "SAIL_PARQUET__FILE_STATISTICS_CACHE__TYPE": "none"}


def _sail_alone(env: dict) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "pysail", "spark", "server", "--ip", "127.0.0.1", "--port", str(port)],
                            env={**os.environ, "RUST_LOG": "warn", **env}, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.1)


def sail_statements(n: int, env: dict) -> dict[str, float]:
    """KiB of PSS the server keeps per statement, by kind."""
    os.environ.setdefault("SPARK_CONNECT_MODE_ENABLED", "1")
    from pyspark.sql.connect.session import SparkSession

    proc, port = _sail_alone(env)
    work = Path(tempfile.mkdtemp(prefix="sail-memory-"))
    try:
        spark = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").create()
        path = str(work / "t")
        spark.sql(f"CREATE TABLE t (id BIGINT, v STRING) USING delta LOCATION '{path}'").collect()
        spark.createDataFrame(pa.table({"id": list(range(1000)), "v": ["a"] * 1000})).write.format("delta") \
            .mode("append").save(path)
        batch = pa.table({"id": list(range(10)), "v": ["b"] * 10})

        def merge(k):
            spark.createDataFrame(batch).createOrReplaceTempView("src")
            spark.sql("MERGE INTO t USING src ON t.id = src.id WHEN MATCHED THEN UPDATE SET v = src.v "
                      "WHEN NOT MATCHED THEN INSERT (id, v) VALUES (src.id, src.v)").collect()

        kinds = {
            "config RPC (spark.conf.get)": lambda k: spark.conf.get("spark.sql.ansi.enabled"),
            "analyze (a DataFrame's schema)": lambda k: spark.range(1).schema,
            "DataFrame query (range(1).collect)": lambda k: spark.range(1).collect(),
            "SQL command (spark.sql, no collect)": lambda k: spark.sql("SELECT 1"),
            "SQL query (spark.sql(...).collect)": lambda k: spark.sql("SELECT 1").collect(),
            "append commit (DataFrame writer)": lambda k: spark.createDataFrame(batch).write.format("delta")
            .mode("append").save(path),
            "MERGE commit (view + MERGE)": merge,
        }
        pss = lambda: psutil.Process(proc.pid).memory_full_info().pss  # noqa: E731
        for fn in kinds.values():      # warm every path once
            fn(0)
        out = {}
        for name, fn in kinds.items():
            before = pss()
            for k in range(n):
                fn(k)
            out[name] = round((pss() - before) / 1024 / n, 1)
            print(f"  {name}: {out[name]} KiB per statement", flush=True)
        spark.stop()
        return out
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def door_objects(commits: int, tables: int = 4) -> dict:
    """tracemalloc of this process (the core and the Spark Connect client) over `commits` small upserts."""
    from delta_destination.core.api import DeltaCore
    from delta_destination.core.changes import ChangeSet, Changes, Op
    from delta_destination.core.model import Column, DataType, TableSchema
    from delta_destination.engines.pool import EnginePool
    from delta_destination.engines.router import EngineRouter
    from delta_destination.engines.supervisor import RecyclePolicy
    from delta_destination.settings import Settings

    work = Path(tempfile.mkdtemp(prefix="door-memory-"))
    engines = EnginePool(recycle=RecyclePolicy(max_memory_bytes=0, max_requests=0))
    core = DeltaCore(EngineRouter(engines), door="bench")
    settings = Settings.create(str(work / "wh"))
    schema = TableSchema("t", (Column("id", DataType.LONG, primary_key=True), Column("v", DataType.STRING)))
    names = [f"t{i}" for i in range(tables)]
    for name in names:
        core.tables.create(settings, "m", TableSchema(name, schema.columns))

    def commit(k: int):
        ids = pa.array([(k * 7 + j) % 5000 for j in range(50)], pa.int64())
        cs = ChangeSet()
        cs.add(Changes(Op.UPSERT, pa.table({"id": ids, "v": pa.array([f"v{k}"] * 50)}), source="bench"))
        core.writer.write(settings, "m", names[k % tables], lambda t: cs)

    me = psutil.Process()
    warm = min(200, commits // 4)
    try:
        for k in range(warm):
            commit(k)
        gc.collect()
        tracemalloc.start(25)
        first, rss0 = tracemalloc.take_snapshot(), me.memory_info().rss
        for k in range(warm, commits):
            commit(k)
        gc.collect()
        last, rss1 = tracemalloc.take_snapshot(), me.memory_info().rss
        stats = last.compare_to(first, "traceback")
        growth = sum(s.size_diff for s in stats)
        top = []
        for s in stats[:8]:
            frames = [f"{Path(f.filename).name}:{f.lineno}" for f in s.traceback if "site-packages" not in f.filename
                      or "pyspark" in f.filename][-3:]
            top.append({"kib": round(s.size_diff / 1024, 1), "count": s.count_diff, "where": " <- ".join(frames)})
        n = commits - warm
        result = {"commits_measured": n, "python_objects_kib_per_commit": round(growth / 1024 / n, 2),
                  "door_rss_mib_per_1000_commits": round((rss1 - rss0) / MIB / n * 1000, 1), "top": top}
        print(result, flush=True)
        return result
    finally:
        tracemalloc.stop()
        engines.stop()
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("sail", "door"))
    ap.add_argument("-n", type=int, default=500, help="statements per kind (sail) or commits (door)")
    args = ap.parse_args(argv)
    if args.what == "sail":
        print("Sail alone, default settings:")
        sail_statements(args.n, {})
        print("Sail alone, Parquet metadata and statistics caches off:")
        sail_statements(args.n, CACHES_OFF)
    else:
        door_objects(args.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
