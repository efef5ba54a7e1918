"""Where a keyed upsert's time goes on the local Apache Spark + Delta engine (experiment).

Why: on 2 cores a 100k-row upsert into a 1M-row table takes ~13-18 s on Spark against ~1.6 s
for bare delta-rs (docs/benchmarks.md). This script isolates the MERGE from the destination
(no gRPC, no batch files) and prints Delta's own operationMetrics for each MERGE, so the
time splits into materialising the source, finding touched files (scan) and writing
(rewrite), and Spark settings can be compared one at a time.

What it does:
  1. starts the local engine exactly as the destination does (engines/spark_process.py),
     with any extra `--conf k=v` added to its configuration;
  2. creates an N-row x 20-column Delta table like the destination's (deletion vectors and
     column mapping by name unless --no-dv), filled inside the JVM (spark.range);
  3. runs --repeat MERGEs of --batch rows (half stored keys drawn uniformly, half new keys)
     shipped as a Spark Connect local relation, in the destination's positional form
     (`op`, `c<i>`; --flags adds `u<i>` keep-stored flags as partial updates do);
  4. prints ship and MERGE wall time and the MERGE's operationMetrics.
The first MERGE of a fresh JVM is slower (class loading, JIT): compare the later ones.

Usage (from the repository root, after `make install`):
  .venv/bin/python -m bench.engines.spark_merge_profile --rows 1000000
  .venv/bin/python -m bench.engines.spark_merge_profile --conf spark.databricks.delta.merge.materializeSource=none
  DELTA_DESTINATION_SPARK_DRIVER_MEMORY=4g .venv/bin/python -m bench.engines.spark_merge_profile
Results: docs/performance-analysis.md ("Apache Spark: where an upsert's time goes").
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from delta_destination.engines.dialect import SparkDialect
from delta_destination.engines.pool import connect
from delta_destination.engines.spark_process import LocalSparkServer, SparkProcessOptions

COLUMNS = (["id BIGINT"] + [f"s{i} STRING" for i in range(8)] + [f"l{i} BIGINT" for i in range(5)]
           + [f"d{i} DOUBLE" for i in range(4)] + ["ts0 TIMESTAMP", "ts1 TIMESTAMP"])
NAMES = [c.split()[0] for c in COLUMNS]
FILLED = (["id"] + [f"concat('value-', cast(id * {i + 7} % 100003 as string), '-text') AS s{i}" for i in range(8)]
          + [f"id * {i + 3} AS l{i}" for i in range(5)] + [f"cast(id as double) / {i + 2} AS d{i}" for i in range(4)]
          + ["timestamp_millis(1700000000000 + id) AS ts0", "timestamp_millis(1600000000000 + id) AS ts1"])
FLAGGED = (3, 4)
METRICS = ("executionTimeMs", "materializeSourceTimeMs", "scanTimeMs", "rewriteTimeMs", "numTargetFilesAdded",
           "numTargetFilesRemoved", "numTargetDeletionVectorsAdded", "numTargetRowsCopied", "numTargetRowsUpdated",
           "numTargetRowsInserted")


def batch(rng: np.random.Generator, stored: int, next_key: int, rows: int, flags: bool) -> pa.Table:
    ids = np.concatenate([rng.choice(stored, rows // 2, replace=False),
                          np.arange(next_key, next_key + rows - rows // 2)])
    cols = {"op": pa.array(np.zeros(rows, dtype=np.int8)), "c0": pa.array(ids)}
    for i in range(8):
        cols[f"c{1 + i}"] = pa.array([f"new-{x}-{i}" for x in ids])
    for i in range(5):
        cols[f"c{9 + i}"] = pa.array(ids * 11 + i)
    for i in range(4):
        cols[f"c{14 + i}"] = pa.array(ids / 3.0 + i)
    for i in range(2):
        cols[f"c{18 + i}"] = pa.array((1750000000000 + ids).astype("datetime64[ms]").astype("datetime64[us]"))
    if flags:
        for i in FLAGGED:
            cols[f"u{i}"] = pa.array(rng.random(rows) < 0.3)
    return pa.table(cols)


def merge_statement(location: str, flags: bool) -> str:
    sets = []
    for i, n in enumerate(NAMES[1:], start=1):
        value = f"CASE WHEN s.u{i} THEN t.`{n}` ELSE s.c{i} END" if flags and i in FLAGGED else f"s.c{i}"
        sets.append(f"`{n}` = {value}")
    return (f"MERGE INTO delta.`{location}` AS t USING src AS s ON t.`id` = s.c0 "
            f"WHEN MATCHED AND s.op = 2 THEN DELETE WHEN MATCHED AND s.op <> 2 THEN UPDATE SET {', '.join(sets)} "
            f"WHEN NOT MATCHED AND s.op = 0 THEN INSERT ({', '.join(f'`{n}`' for n in NAMES)}) "
            f"VALUES ({', '.join(f's.c{i}' for i in range(len(NAMES)))})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows in the target table")
    ap.add_argument("--batch", type=int, default=100_000, help="rows per MERGE (half stored keys)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--conf", action="append", default=[], metavar="K=V", help="extra engine configuration")
    ap.add_argument("--no-dv", action="store_true", help="a table without deletion vectors")
    ap.add_argument("--flags", action="store_true", help="keep-stored flags in two columns (partial updates)")
    args = ap.parse_args()

    started = time.monotonic()
    engine = LocalSparkServer(SparkProcessOptions(extra_conf=tuple(tuple(c.split("=", 1)) for c in args.conf)))
    work = Path(tempfile.mkdtemp(prefix="spark-merge-profile-"))
    try:
        spark = connect(engine.url, SparkDialect.session_conf)
        print(f"engine up in {time.monotonic() - started:.1f}s", flush=True)
        location = str(work / "t")
        props = {"delta.enableDeletionVectors": "false" if args.no_dv else "true", "delta.columnMapping.mode": "name"}
        spark.sql(f"CREATE TABLE delta.`{location}` ({', '.join(COLUMNS)}) USING delta TBLPROPERTIES ("
                  + ", ".join(f"'{k}' = '{v}'" for k, v in props.items()) + ")").collect()
        t = time.monotonic()
        for start in range(0, args.rows, 1_000_000):  # appends of up to 1M rows, like the benchmark's loads
            end = min(args.rows, start + 1_000_000)
            spark.sql(f"INSERT INTO delta.`{location}` SELECT {', '.join(FILLED)} FROM range({start}, {end}, 1, 4)").collect()
        print(f"table of {args.rows} rows built in {time.monotonic() - t:.1f}s", flush=True)
        rng = np.random.default_rng(7)
        next_key = args.rows
        for r in range(args.repeat):
            source = batch(rng, args.rows, next_key, args.batch, args.flags)
            next_key += args.batch - args.batch // 2
            t = time.monotonic()
            spark.createDataFrame(source).createOrReplaceTempView("src")
            shipped = time.monotonic() - t
            t = time.monotonic()
            spark.sql(merge_statement(location, args.flags)).collect()
            merged = time.monotonic() - t
            metrics = spark.sql(f"DESCRIBE HISTORY delta.`{location}` LIMIT 1").collect()[0]["operationMetrics"]
            print(f"merge {r}: ship {shipped:.2f}s, MERGE {merged:.2f}s "
                  + json.dumps({k: metrics.get(k) for k in METRICS}), flush=True)
        spark.stop()
    finally:
        engine.stop()
        shutil.rmtree(work, ignore_errors=True)
    os._exit(0)  # the Spark Connect client's threads would keep the process alive


if __name__ == "__main__":
    main()
