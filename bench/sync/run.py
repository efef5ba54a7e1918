"""The sync benchmark: what Fivetran mostly sends, on each deployment, beside the bare floor.

    .venv/bin/python -m bench.sync                          # make bench-sync: every deployment
    .venv/bin/python -m bench.sync --deployments default    # one: default, spark, cluster, cluster-spark

Many tables (40), each DescribeTable, CreateTable and an initial load (2,000 rows), then rounds (3) of
DescribeTable + one WriteBatch (100 upserts of which half new keys, 20 partial updates, 5 deletes),
`in_flight` (4) requests at a time, one table never written by two at once. The same requests are then
applied by the floor (bench/common/floor.py: the bare libraries, on as many threads) to tables of its own,
which every destination table must equal (and the reference model too). Deployments:

- default: `make run` (engine auto: the embedded engine for all of it);
- spark: `make run ENGINE=spark` (the local Apache Spark engine, warm: a first request before timing);
- cluster: the local cluster (`make cluster`: Spark standalone, its S3 server, a Hive metastore) with the
  destination as a user starts it against it: `--spark-remote ... --warehouse s3://... --catalog-uri ...`
  (engine auto: the embedded engine writes, the cluster registers);
- cluster-spark: the same with `--engine spark` (everything on the cluster: how it ran before).

Results: docs/sync-results.json and docs/benchmarks.md, section "Many tables, small batches".
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import grpc

from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from testkit.delta_read import read_delta_table
from testkit.server_process import ROOT, RunningServer

from ..common import floor
from ..common.report_sections import splice
from ..common.small_batches import Shape, SmallBatches
from ..common.door_measures import latency_summary

DOCS = ROOT / "docs"
RESULTS = DOCS / "sync-results.json"
SCHEMA = "sync"
UPDATED = ["qty", "note", "_fivetran_synced"]      # the columns the workload's partial updates set
HEADING = "## Many tables, small batches (make bench-sync)"


@dataclass
class Deployment:
    name: str
    launcher: Callable[[Path, int], list[str]]     # (warehouse, port) -> the server's command line
    warehouse: Callable[[Path], str]                # the work folder -> the warehouse (a path or URL)
    env: dict
    storage_options: Optional[dict] = None
    warm_up: bool = False
    describe: str = ""


def make_run(*make_vars: str):
    return lambda wh, port: ["make", "--no-print-directory", "run", f"PORT={port}", f"WAREHOUSE={wh}", *make_vars]


def deployments(names: list[str], work: Path, stack) -> Iterator[Deployment]:
    """One at a time: the local cluster starts only once the runs before it are over (it started first
    and its JVMs' start-up shared the machine with the default deployment's run, 2026-11-28)."""
    local = lambda w: str(w / "warehouse")  # noqa: E731
    if "default" in names:
        yield Deployment("default", make_run(), local, {}, describe="make run (engine auto)")
    if "spark" in names:
        yield Deployment("spark", make_run("ENGINE=spark"), local, {}, warm_up=True,
                         describe="make run ENGINE=spark (the local JVM, warmed up by one request)")
    if any(n.startswith("cluster") for n in names):
        cluster = stack.enter_context(local_cluster(work))
        env = cluster.env()
        s3 = cluster.s3
        for name, engine in (("cluster", ()), ("cluster-spark", ("--engine", "spark"))):
            if name not in names:
                continue
            args = (*engine, "--spark-remote", env["SPARK_REMOTE"], "--catalog-uri", env["CATALOG_URI"])

            def launcher(wh, port, args=args):
                return [sys.executable, "-m", "delta_destination.doors.fivetran.main", "--port", str(port),
                        "--warehouse", str(wh), *args]

            def warehouse(w, name=name, env=env):
                return f"{env['WAREHOUSE']}/{name}-{w.name}"

            yield Deployment(name, launcher, warehouse, s3.env(), s3.storage_options(), warm_up=True,
                             describe=f"the local cluster and its metastore, warehouse on its S3, "
                                      f"{'engine spark (everything on the cluster)' if engine else 'engine auto'}")


class local_cluster:
    """The local cluster for the run (started and stopped here)."""

    def __init__(self, work: Path):
        self.work = work

    def __enter__(self):
        from tools.local_cluster import ClusterOptions, LocalCluster

        self.cluster = LocalCluster(self.work / "cluster", ClusterOptions())
        self.cluster.start()
        return self.cluster

    def __exit__(self, *exc):
        self.cluster.stop()


class Run:
    """One deployment: the server, the requests, the latencies."""

    def __init__(self, dep: Deployment, batches: SmallBatches, rounds: int, in_flight: int, work: Path):
        self.dep, self.batches, self.rounds, self.in_flight, self.work = dep, batches, rounds, in_flight, work
        self.latency: dict[str, list[float]] = {"DescribeTable": [], "CreateTable": [], "WriteBatch": []}
        self.failures: list[str] = []
        self._lock = threading.Lock()

    def call(self, kind: str, fn, req):
        began = time.monotonic()
        try:
            resp = fn(req, timeout=1800)
        except grpc.RpcError as exc:
            with self._lock:
                self.failures.append(f"{kind}: {exc.code().name}: {exc.details()}")
            return None
        with self._lock:
            self.latency[kind].append(time.monotonic() - began)
        return resp

    def run(self, requests: dict[str, list]) -> dict:
        wh = self.dep.warehouse(self.work)
        srv = RunningServer(wh, self.work / "server.log", launcher=lambda port: self.dep.launcher(wh, port),
                            env=self.dep.env)
        try:
            if self.dep.warm_up:   # a warm engine, as the steady state of a long-running destination
                self.call("DescribeTable", srv.stub.DescribeTable, pb.DescribeTableRequest(schema_name="warm",
                                                                                          table_name="none"))
                self.latency["DescribeTable"].clear()
            began = time.monotonic()

            def table_work(feed):
                for i, req in enumerate(requests[feed.name]):
                    self.call("DescribeTable", srv.stub.DescribeTable,
                              pb.DescribeTableRequest(schema_name=SCHEMA, table_name=feed.name))
                    if i == 0:
                        self.call("CreateTable", srv.stub.CreateTable,
                                  pb.CreateTableRequest(schema_name=SCHEMA, table=feed.proto))
                    self.call("WriteBatch", srv.stub.WriteBatch, req)

            with ThreadPoolExecutor(self.in_flight) as pool:
                list(pool.map(table_work, self.batches.feeds))
            seconds = time.monotonic() - began
        finally:
            srv.stop()
        return {"seconds": round(seconds, 1), "warehouse": wh,
                "latency": {k: latency_summary(v) for k, v in self.latency.items()},
                "failed_requests": len(self.failures), "failures": self.failures[:10]}


def run_floor(batches: SmallBatches, requests: dict[str, list], root: str, threads: int, storage_options) -> float:
    began = time.monotonic()

    def table_work(feed):
        for req in requests[feed.name]:
            floor.apply(req, feed.schema, f"{root}/{feed.name}", UPDATED, storage_options)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(table_work, batches.feeds))
    return time.monotonic() - began


def compare_with_floor(batches: SmallBatches, destination: str, floor_root: str, storage_options) -> list[str]:
    out = []
    for feed in batches.feeds:
        mine = read_delta_table(f"{destination}/{SCHEMA}/{feed.name}", storage_options)
        theirs = read_delta_table(f"{floor_root}/{feed.name}", storage_options)
        if not floor.same_rows(mine, theirs):
            out.append(f"{feed.name}: differs from the floor's table ({mine.num_rows} vs {theirs.num_rows} rows)")
    return out


def one(dep: Deployment, args, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    shape = Shape(initial_rows=args.initial_rows, upserts=100, new_share=0.5, updates=20, deletes=5)
    batches = SmallBatches(work / "batches", args.tables, shape)
    requests = {f.name: [f.initial(SCHEMA)] + [f.incremental(SCHEMA) for _ in range(args.rounds)] for f in batches.feeds}
    print(f"{dep.name}: {dep.describe}", flush=True)
    result = Run(dep, batches, args.rounds, args.in_flight, work).run(requests)
    destination = result.pop("warehouse")
    floor_root = (f"{destination}-floor" if "://" in destination else str(work / "floor"))
    floor_seconds = run_floor(batches, requests, floor_root, args.in_flight, dep.storage_options)
    problems = batches.problems(destination, SCHEMA, dep.storage_options) + \
        compare_with_floor(batches, destination, floor_root, dep.storage_options)
    batches.cleanup()
    return {"deployment": dep.name, "describe": dep.describe, "date": time.strftime("%Y-%m-%d"),
            "tables": args.tables, "rounds": args.rounds, "in_flight": args.in_flight, **result,
            "floor_seconds": round(floor_seconds, 1), "ratio": round(result["seconds"] / floor_seconds, 2),
            "tables_equal": not problems, "problems": problems[:10]}


def section(results: list[dict]) -> list[str]:
    out = [HEADING, "",
           "40 tables, each DescribeTable, CreateTable and an initial load of 2,000 rows, then 3 rounds of DescribeTable + "
           "one WriteBatch (100 upserts of which half new keys, 20 partial updates, 5 deletes), 4 requests in flight; "
           "the floor applies the same encrypted zstd files with the bare libraries (cryptography, zstandard, "
           "pyarrow.csv, delta-rs: bench/common/floor.py) on 4 threads. Every table equals the floor's table and the "
           "reference model. `python -m bench.sync` (make bench-sync).", "",
           "| deployment | date | whole sync | floor | ratio | WriteBatch p50 / p95 | DescribeTable p50 / p95 | "
           "CreateTable p50 | failed | tables equal |", "|---|---|---:|---:|---:|---|---|---:|---:|---|"]
    for r in results:
        lat = r["latency"]
        wb, dt, ct = lat["WriteBatch"], lat["DescribeTable"], lat["CreateTable"]
        out.append(f"| {r['deployment']}: {r['describe']} | {r['date']} | {r['seconds']} s | {r['floor_seconds']} s | "
                   f"{r['ratio']}x | {wb.get('p50_s')} / {wb.get('p95_s')} s | {dt.get('p50_s')} / {dt.get('p95_s')} s | "
                   f"{ct.get('p50_s')} s | {r['failed_requests']} | {'yes' if r['tables_equal'] else 'NO'} |")
    return out + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deployments", default="default,spark,cluster,cluster-spark")
    ap.add_argument("--tables", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--initial-rows", type=int, default=2000)
    ap.add_argument("--in-flight", type=int, default=4)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    from contextlib import ExitStack

    names = [n.strip() for n in args.deployments.split(",") if n.strip()]
    work = Path(tempfile.mkdtemp(prefix="sync-", dir=args.work))
    results = []
    with ExitStack() as stack:
        for dep in deployments(names, work, stack):
            r = one(dep, args, work / dep.name)
            print(json.dumps({k: v for k, v in r.items() if k != "problems"}), flush=True)
            if r["problems"]:
                print("  problems: " + "; ".join(r["problems"]), flush=True)
            results.append(r)
    if not args.no_save:
        old = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
        kept = [o for o in old if o["deployment"] not in {r["deployment"] for r in results}]
        RESULTS.write_text(json.dumps(kept + results, indent=1) + "\n")
        splice(DOCS / "benchmarks.md", section(kept + results))
    return 1 if any(r["failed_requests"] or not r["tables_equal"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
