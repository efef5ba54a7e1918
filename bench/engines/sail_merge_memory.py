"""Sail MERGE INTO memory grows with the size of the target table (reproduction).

Versions: pysail 0.7.2, pyspark-client 4.2.0, deltalake (delta-rs) 1.x, pyarrow, Python 3.11,
Linux x86_64 (2 cores, 24 GB).

What it does, per target size N:
  1. builds a Delta table of N rows x 20 columns (id BIGINT key + 19 mixed columns) with
     delta-rs, appended in key order (so per-file min/max statistics on `id` are narrow);
  2. starts Sail in-process (pysail SparkConnectServer) and connects with pyspark-client;
  3. runs ONE `MERGE INTO t USING src ON t.id = s.id WHEN MATCHED THEN UPDATE SET *
     WHEN NOT MATCHED THEN INSERT *` with a 100k-row source (half existing keys, half new);
  4. prints wall time and the process's peak RSS (ru_maxrss; one process per N).

Expected: memory bounded by the source (100k rows) plus a few target files in flight, as with
Apache Spark + delta-spark (which streams the target), so roughly flat in N.
Observed on Sail 0.7.2 (default settings): peak RSS grows linearly with the target
(see docs/sail-merge-memory.md for the numbers); at 3M rows the process passes 8 GB.

Usage:
  python -m bench.engines.sail_merge_memory 300000 1000000           # one child process per N
  python -m bench.engines.sail_merge_memory --keys recent 1000000    # updated keys among the newest
  python -m bench.engines.sail_merge_memory --range 1000000          # adds `AND t.id BETWEEN lo AND hi`
  python -m bench.engines.sail_merge_memory --explain 300000         # prints EXPLAIN of the MERGE
Options: --keys uniform|recent (default uniform), --file-rows R (rows per Parquet file,
default 100000), --range, --explain, --mode merge|probe|overwrite (probe = only the join SELECT;
overwrite = INSERT OVERWRITE of a FULL OUTER JOIN with the batch on the left),
--cap-gb G (a run whose RSS passes G GB is stopped; default 6).
Run it under a memory cap (e.g. `prlimit --as=...` or a cgroup): it does grow.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

COLS = 20
SOURCE_ROWS = 100_000


def columns(ids, rng, np, pa):
    """20 columns: id + 19 mixed (ints, doubles, decimal-ish, strings, dates, timestamps)."""
    n = len(ids)
    out = {"id": pa.array(ids, pa.int64())}
    for j in range(1, COLS):
        kind = j % 6
        if kind == 0:
            out[f"c{j}"] = pa.array(rng.integers(0, 1 << 30, n), pa.int64())
        elif kind == 1:
            out[f"c{j}"] = pa.array(rng.random(n), pa.float64())
        elif kind == 2:
            words = rng.integers(0, 1 << 40, n)
            out[f"c{j}"] = pa.array([f"value-{w:x}-text" for w in words], pa.string())
        elif kind == 3:
            out[f"c{j}"] = pa.array(rng.integers(0, 20000, n).astype("int32"), pa.int32()).cast(pa.date32())
        elif kind == 4:
            out[f"c{j}"] = pa.array(rng.integers(0, 1 << 50, n), pa.int64()).cast(pa.timestamp("us", tz="UTC"))
        else:
            out[f"c{j}"] = pa.array(rng.integers(0, 2, n).astype(bool), pa.bool_())
    return pa.table(out)


def build(path: str, n: int, file_rows: int) -> None:
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake
    rng = np.random.default_rng(1)
    for start in range(0, n, file_rows):
        ids = np.arange(start, min(n, start + file_rows), dtype=np.int64)
        write_deltalake(path, columns(ids, rng, np, pa), mode="append")


def source(n: int, keys: str):
    import numpy as np
    import pyarrow as pa
    rng = np.random.default_rng(2)
    half = SOURCE_ROWS // 2
    if keys == "uniform":
        old = rng.choice(n, half, replace=False)
    else:  # recent: updates among the newest 10% of keys
        lo = max(0, n - max(half, n // 10))
        old = rng.choice(np.arange(lo, n), half, replace=False)
    new = np.arange(n, n + SOURCE_ROWS - half)
    return columns(np.concatenate([old, new]).astype(np.int64), rng, np, pa)


def rss_mb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def watchdog(cap_mb: int) -> None:
    """Ends the process (exit 3) when its RSS passes the cap: the machine is shared."""
    import threading

    def watch():
        while True:
            if rss_mb() > cap_mb:
                print(f"RSS passed the cap of {cap_mb} MB: stopped", file=sys.stderr, flush=True)
                os._exit(3)
            time.sleep(0.1)
    threading.Thread(target=watch, daemon=True).start()


def run_one(n: int, args) -> dict:
    """In a fresh process: build, start Sail, MERGE, report."""
    watchdog(int(args.cap_gb * 1024))
    os.environ.setdefault("SAIL_RUNTIME__TEMPORARY_FILES__MAX_SIZE", "0")
    os.environ.setdefault("RUST_LOG", "warn")
    import pyarrow.compute as pc
    from pysail.spark import SparkConnectServer
    from pyspark.sql import SparkSession

    work = tempfile.mkdtemp(prefix="sail_merge_")
    path = os.path.join(work, "t")
    build(path, n, args.file_rows)
    target_bytes = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".parquet"))
    rss_built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    server = SparkConnectServer(ip="127.0.0.1", port=0)
    server.start(background=True)
    host, port = server.listening_address
    spark = SparkSession.builder.remote(f"sc://{host}:{port}").getOrCreate()
    spark.sql(f"CREATE TABLE t USING delta LOCATION '{path}'").collect()
    src = source(n, args.keys)
    spark.createDataFrame(src).createOrReplaceTempView("s")
    on = "t.id = s.id"
    if args.range:
        lo, hi = pc.min_max(src.column("id")).values()
        on += f" AND t.id BETWEEN {lo.as_py()} AND {hi.as_py()}"
    cols = [f"c{j}" for j in range(1, COLS)]
    sets = ", ".join(f"{c} = s.{c}" for c in cols)
    names = ", ".join(["id"] + cols)
    vals = ", ".join(f"s.{c}" for c in ["id"] + cols)
    if args.mode == "probe":
        sql = f"SELECT count(*) FROM t JOIN s ON {on}"
    elif args.mode == "overwrite":
        # Copy-on-write by hand: one full overwrite, batch on the join's left (build) side.
        picks = ", ".join(f"CASE WHEN s.id IS NOT NULL THEN s.{c} ELSE t.{c} END AS {c}" for c in ["id"] + cols)
        sql = f"INSERT OVERWRITE TABLE t SELECT {picks} FROM s FULL OUTER JOIN t ON {on}"
    else:
        sql = (f"MERGE INTO t USING s ON {on} WHEN MATCHED THEN UPDATE SET {sets} "
               f"WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({vals})")
    print(f"built {n} rows, RSS {rss_mb()} MB; merging", file=sys.stderr, flush=True)
    if args.explain:
        for row in spark.sql("EXPLAIN " + sql).collect():
            print(row[0])
    t0 = time.monotonic()
    spark.sql(sql).collect()
    took = time.monotonic() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    count = spark.sql("SELECT count(*) FROM t").collect()[0][0] if args.mode != "probe" else None
    import shutil
    shutil.rmtree(work, ignore_errors=True)
    return {"rows": n, "target_mb": round(target_bytes / 2**20, 1), "merge_s": round(took, 1), "peak_rss_mb": rss, "rss_after_build_mb": rss_built,
            "rows_after": count, "keys": args.keys, "range": args.range, "file_rows": args.file_rows,
            "mode": args.mode}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+", type=int)
    ap.add_argument("--keys", choices=["uniform", "recent"], default="uniform")
    ap.add_argument("--file-rows", type=int, default=100_000)
    ap.add_argument("--range", action="store_true")
    ap.add_argument("--explain", action="store_true")
    ap.add_argument("--mode", choices=["merge", "probe", "overwrite"], default="merge")
    ap.add_argument("--cap-gb", type=float, default=6.0, help="stop a run whose RSS passes this")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(run_one(args.rows[0], args)), flush=True)
        os._exit(0)  # the in-process Sail server does not stop on its own
    for n in args.rows:
        cmd = [sys.executable, __file__, "--child", str(n), "--keys", args.keys, "--file-rows", str(args.file_rows),
               "--mode", args.mode, "--cap-gb", str(args.cap_gb)] + (["--range"] if args.range else []) + (["--explain"] if args.explain else [])
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = [ln for ln in out.stdout.splitlines()]
        for ln in lines:
            print(ln[7:] if ln.startswith("RESULT ") else ln)
        if out.returncode:
            print(json.dumps({"rows": n, "failed": out.returncode, "stderr": out.stderr[-800:]}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
