"""The cluster run: the 100k upsert into a 1M-row and into a 10M-row table through a destination on
the local cluster (tools/local_cluster.LocalCluster: a Spark standalone master and two workers, a Spark
Connect server on them, SeaweedFS S3 and a Hive metastore; the destination started with
`--engine spark --spark-remote ... --catalog-uri ...` and its warehouse on the cluster's bucket), and
beside it the same steps through the local Apache Spark engine (`--engine spark`, a local directory).

The table grows as the growth series grows it (1M-row WriteBatch appends of the same files, 1M -> 3M
-> 10M); the upserts are the series' uniform ones (half existing keys, half new). Each upsert runs on
a freshly started destination. The memory figure is the peak of the whole process tree at one moment:
the destination's tree plus, on the cluster, every part's tree (master, workers with their executors,
Connect server, metastore, SeaweedFS), sampled every 0.2 s.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path
from typing import Optional

from ..common import data as bd
from .results import gb, rate, seconds
from ..common.rpc import SCHEMA, create_table, describe_table, write_batch
from .sampling import tree_rss
from .steps import Bench
from .workloads import Plan
from testkit.polling import Poller

HEADING = "## The local cluster (Spark standalone, S3, Hive metastore)"
TARGETS = ("cluster", "local")  # where the destination's engine runs
UPSERT_AT = (0, 2)              # the growth sizes (1M, 3M, 10M) at which the upsert is measured: 1M and 10M


class TreesPeak(Poller):
    """The peak of the summed RSS of some process trees at one moment (one sample sums them all)."""

    def __init__(self, pids: dict[str, int]):
        super().__init__(0.2)
        self.pids = pids
        self.peak = 0
        self.parts: dict[str, int] = {}

    def poll(self) -> None:
        parts = {}
        for name, pid in self.pids.items():
            try:
                import psutil

                parts[name] = tree_rss(psutil.Process(pid))
            except Exception:  # noqa: BLE001 - a process that just exited counts as nothing
                parts[name] = 0
        total = sum(parts.values())
        if total > self.peak:
            self.peak, self.parts = total, parts


def _steps(p: Plan) -> list[tuple[str, str, list, int]]:
    """(kind, name, files, table size before) in order: appends (setup) and the measured upserts."""
    s, f = p.sizes, p.files
    out: list[tuple[str, str, list, int]] = []
    size = 0
    new_keys = 0
    groups = ["init"] + [f"g_append_{i}" for i in range(1, len(s.growth))]
    for i, group in enumerate(groups):
        for j, req in enumerate(bd.chunked(f[group], s.per_request)):
            rows = sum(x.rows for x in req)
            out.append(("append", f"append {rows:,} rows at {size + new_keys:,}", req, size + new_keys))
            size += rows
        if i in UPSERT_AT:
            upsert = "upsert" if i == 0 else f"g_upsert_{i}"
            out.append(("upsert", f"upsert at {s.growth[i] / 1e6:g}M", f[upsert], size + new_keys))
            new_keys += s.batch - s.batch // 2
    return out


def expected_rows(p: Plan) -> int:
    return p.sizes.growth[-1] + len(UPSERT_AT) * (p.sizes.batch - p.sizes.batch // 2)


def _one(args, tmp: Path, p: Plan, target: str, cluster, out: dict, log) -> None:
    """Every step through one destination (restarted before each upsert) with its engine on `target`."""
    bench = Bench(argparse.Namespace(**{**vars(args), "engines": ["spark"]}), tmp)
    bench.log = log
    table = bd.TABLES["growth"]
    storage_options = None
    trees: dict[str, int] = {}
    if target == "cluster":
        env = cluster.env()
        bench.warehouses["spark"] = f"{env['WAREHOUSE']}/bench-{tmp.name}"
        bench.server_env = {k: v for k, v in env.items() if k.startswith("AWS_")}
        bench.server_args = ("--spark-remote", env["SPARK_REMOTE"], "--catalog-uri", env["CATALOG_URI"])
        storage_options = cluster.s3.storage_options()
        trees.update(cluster.pids())
    try:
        bench.start()
        create_table(bench.stub, table)
        for kind, name, files, size in _steps(p):
            if kind == "upsert":
                bench.restart_server(f"(fresh server for the upsert at {size:,} rows)")
                describe_table(bench.stub, table)  # the first request of a new server reads the metadata
            with TreesPeak({**trees, "destination": bench.server.proc.pid}) as peak:
                r = bench.step(f"{name} [{target}]", rows=sum(x.rows for x in files), specs=files, table_size=size,
                               setup=kind == "append", baseline_fn=None,
                               server_fn=lambda fs=files, n=name: write_batch(bench.stub, table, replace=fs,
                                                                              label=n))["spark"]
            r.update(target=target, kind=kind, step=name, tree_peak_rss=peak.peak,
                     tree_peak_parts={k: v for k, v in peak.parts.items() if v})
            out["results"].append(r)
            if r.get("server_s") is None:
                break
        else:
            path = f"{bench.warehouses['spark']}/{SCHEMA}/{table.name}"
            out["rows"][target] = bench.bl.call("count", path=path, storage_options=storage_options)["rows"]
    finally:
        bench.stop()
        out["events"] += bench.events
        out["failures"] += bench.failures


def run_cluster(args, p: Plan, tmp: Path, log) -> dict:
    """The cluster first (started here, stopped at the end), then the local engine alone."""
    from tools.local_cluster import ClusterOptions, LocalCluster

    started = dt.datetime.now(dt.timezone.utc)
    out = {"started": started.isoformat(timespec="seconds"), "loadavg_before": _loadavg(), "nproc": os.cpu_count(),
           "scale": args.scale, "results": [], "events": [], "failures": [], "rows": {},
           "rows_expected": expected_rows(p),
           "command": " ".join([".venv/bin/python", "-m", "bench", *sys.argv[1:]])}
    for target in TARGETS:
        sub = tmp / f"cluster-run-{target}"
        sub.mkdir()
        log(f"cluster run: {target}")
        try:
            if target == "cluster":
                cluster = LocalCluster(sub / "state", ClusterOptions())
                cluster.start()
                out["cluster_start_s"] = round(cluster.timings.get("cluster", 0.0), 1)
                try:
                    _one(args, sub, p, target, cluster, out, log)
                finally:
                    cluster.stop()
            else:
                _one(args, sub, p, target, None, out, log)
        except Exception as exc:  # noqa: BLE001
            out["failures"].append(f"{target}: {type(exc).__name__}: {str(exc)[:1500]}")
            log(f"    cluster run: {target} FAILED: {str(exc)[:500]}")
    out["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    out["loadavg_after"] = _loadavg()
    return out


def _loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


# ---- the report's section ---------------------------------------------------------------------------

def _cell(res: dict, target: str, step: str) -> Optional[dict]:
    return next((r for r in res["results"] if r["target"] == target and r["step"] == step), None)


def section(res: Optional[dict]) -> list[str]:
    """The report's section for a cluster result (none without one)."""
    if not res or not (res.get("results") or res.get("failures")):
        return []
    steps = list(dict.fromkeys(r["step"] for r in res["results"]))
    lines = [HEADING, "",
             f"Measured {res['started']} to {res['finished']} at scale {res['scale']:g}: one table grown to 1M and "
             "then 10M rows with 1M-row WriteBatch appends (the growth series' files), and at each size the 100k "
             "upsert (half existing keys, half new) on a freshly started destination. **cluster**: the "
             "destination started with `--engine spark --spark-remote <the cluster's Connect server> "
             "--catalog-uri <its metastore>` and `--warehouse s3://...` on the cluster's SeaweedFS bucket, as "
             "`make cluster` sets it up (a standalone master and two workers, each executor with 1 core; every "
             "table registered in the Hive metastore). **local**: the same steps with `--engine spark` (the "
             "local Spark JVM, `local[*]`) and a local directory. Peak RSS: the whole process tree at one moment "
             f"(the destination and, for the cluster, every JVM of the cluster and SeaweedFS). Cluster start-up: "
             f"{seconds(res.get('cluster_start_s'))} s.", "",
             f"Load average before: `{res['loadavg_before']}`; after: `{res['loadavg_after']}` ({res['nproc']} cores; "
             "everything runs on the same 2 cores, so the cluster's executors, its driver, SeaweedFS and the "
             "destination compete for them).", "",
             "| step | cluster s | cluster rows/s | cluster peak RSS (all processes) | local s | local rows/s | "
             "local peak RSS | cluster / local |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for step in steps:
        a, b = _cell(res, "cluster", step), _cell(res, "local", step)
        cells = []
        for r in (a, b):
            cells += ([seconds(r.get("server_s")), rate(r.get("rows_per_s")), gb(r.get("tree_peak_rss"))]
                      if r else ["-"] * 3)
        x = a["server_s"] / b["server_s"] if a and b and a.get("server_s") and b.get("server_s") else None
        bold = "**" if step.startswith("upsert") else ""
        lines.append(f"| {bold}{step}{bold} | " + " | ".join(cells) + f" | {f'{x:.2f}x' if x else '-'} |")
    peaks = [r for r in res["results"] if r["target"] == "cluster" and r.get("tree_peak_parts")]
    if peaks:
        top = max(peaks, key=lambda r: r["tree_peak_rss"])
        lines += ["", f"The cluster's highest peak ({top['step']}), by part: "
                  + ", ".join(f"{k} {gb(v)}" for k, v in top["tree_peak_parts"].items()) + "."]
    lines += ["", "Rows in the table at the end (delta-rs): "
              + "; ".join(f"{t}: {n:,}" for t, n in res.get("rows", {}).items())
              + f" (expected {res['rows_expected']:,})"
              + (" **MISMATCH**" if any(n != res["rows_expected"] for n in res.get("rows", {}).values()) else "")]
    lines += ["", f"Run by `{res.get('command', '.venv/bin/python -m bench --cluster')}` (`--cluster`: this "
              "section alone, put into the existing page; its figures in cluster-results.json)."]
    if res["failures"]:
        lines += ["", "Failures:", ""] + [f"- `{x[:600]}`" for x in res["failures"]]
    return lines + [""]
