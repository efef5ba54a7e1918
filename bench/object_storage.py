"""The object-storage run: the initial load and the 100k upsert into it, on a warehouse on a real S3
server (delta_destination/tools/s3_server.S3Server, SeaweedFS on loopback) and on a local directory, back to back,
one engine at a time; each RPC timed and the server's process tree sampled as in the local run
(steps.Bench with one engine, no baseline). Target: the S3 initial load within 1.5x of the
same load to a local directory on the same engine."""
from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
from pathlib import Path
from typing import Optional

import psutil

from . import data as bd
from .results import gb, rate, ratio, seconds
from .rpc import SCHEMA, create_table, write_batch
from .sampling import tree_cpu
from .steps import Bench
from .workloads import Plan
from delta_destination.tools.s3_server import S3Server

TARGET_S3_RATIO = 1.5
STORAGES = ("local", "s3")
HEADING = "## Object storage (S3, SeaweedFS on loopback)"
WORKLOADS = ("initial_load", "upsert")
_TOOK = re.compile(r'"message": "(.+?) took ([0-9.]+)s"')  # delta_destination.logs.timed: phases over 2 s


def server_phases(log_text: str) -> list[list[str]]:
    """The slow phases the server logged, per WriteBatch in order (where a request's time went); a
    phase logged n times (e.g. staging chunks) as its total and n."""
    steps, cur = [], {}
    for what, s in _TOOK.findall(log_text):
        if what == "WriteBatch":
            steps.append([f"{w} {sum(t):.1f} s" + (f" ({len(t)}x)" if len(t) > 1 else "") for w, t in cur.items()])
            cur = {}
        elif what not in ("CreateTable", "create table"):
            cur.setdefault(what, []).append(float(s))
    return steps


def _loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def _one(args, tmp: Path, p: Plan, engine: str, storage: str, s3: S3Server, out: dict, log) -> None:
    """Both workloads on a fresh server of `engine` with its warehouse on `storage`; rows, events and
    failures into `out`."""
    bench = Bench(argparse.Namespace(**{**vars(args), "engines": [engine]}), tmp)
    bench.log = log
    if storage == "s3":
        bench.warehouses[engine] = s3.url(f"{tmp.name}/warehouse-{engine}")
        bench.server_env = s3.env()
    W, s, f = bd.WIDE, p.sizes, p.files
    rows = []
    try:
        bench.start()
        weed = psutil.Process(s3.pid)
        create_table(bench.stub, W)
        for name, group, size in (("initial_load", "init", 0), ("upsert", "upsert", s.base)):
            cpu0 = tree_cpu(weed)
            r = bench.step(f"{name} [{storage}]", rows=s.base if group == "init" else s.batch, specs=f[group],
                           table_size=size, baseline_fn=None,
                           server_fn=lambda g=group, n=name: write_batch(bench.stub, W, replace=f[g], label=n))[engine]
            r.update(storage=storage, step=name, s3_server_cpu_s=tree_cpu(weed) - cpu0 if storage == "s3" else None)
            rows.append(r)
            if r.get("server_s") is None:
                break
        else:
            path = f"{bench.warehouses[engine]}/{SCHEMA}/{W.name}"
            rows[-1]["rows_table"] = bench.bl.call("count", path=path,
                                                   storage_options=s3.storage_options() if storage == "s3" else None
                                                   )["rows"]
            rows[-1]["rows_expected"] = s.base + s.batch - s.batch // 2
    finally:
        logs = bench.stop()
        for r, phases in zip(rows, server_phases(logs)):
            r["server_phases"] = phases
        out["results"] += rows
        out["events"] += bench.events
        out["failures"] += bench.failures


def run_object_storage(args, p: Plan, tmp: Path, log) -> dict:
    """Per engine (one at a time): both workloads to a local directory, then to S3. What fails is
    recorded in the result's failures (a full run keeps its local figures)."""
    started = dt.datetime.now(dt.timezone.utc)
    out = {"started": started.isoformat(timespec="seconds"), "loadavg_before": _loadavg(), "nproc": os.cpu_count(),
           "scale": args.scale, "results": [], "events": [], "failures": [],
           "command": " ".join([".venv/bin/python", "-m", "bench", *sys.argv[1:]])}
    try:
        with S3Server() as s3:
            out["s3_started_s"] = round(s3.started_in, 1)
            log(f"object storage: SeaweedFS S3 at {s3.endpoint_url} (ready in {s3.started_in:.1f} s)")
            for engine in args.engines:
                for storage in STORAGES:
                    sub = tmp / f"os-{engine}-{storage}"
                    sub.mkdir()
                    log(f"object storage: {engine} on {storage}")
                    try:
                        _one(args, sub, p, engine, storage, s3, out, log)
                    except Exception as exc:  # noqa: BLE001
                        out["failures"].append(f"{engine} on {storage}: {type(exc).__name__}: {str(exc)[:1500]}")
                        log(f"    object storage: {engine} on {storage} FAILED: {str(exc)[:500]}")
            out["s3_server_rss_end"] = s3.rss_bytes()
    except Exception as exc:  # noqa: BLE001 - the S3 server did not start
        out["failures"].append(f"S3 server: {type(exc).__name__}: {str(exc)[:1500]}")
    out["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    out["loadavg_after"] = _loadavg()
    return out


# ---- the report's section ---------------------------------------------------------------------------

def _cell(res: dict, engine: str, storage: str, step: str) -> Optional[dict]:
    return next((r for r in res["results"] if r["engine"] == engine and r["storage"] == storage
                 and r["step"] == step), None)


def _s3_ratio(res: dict, engine: str, step: str) -> Optional[float]:
    a, b = _cell(res, engine, "local", step), _cell(res, engine, "s3", step)
    return b["server_s"] / a["server_s"] if a and b and a.get("server_s") and b.get("server_s") else None


def _cpu(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1f}"


def _rows(res: dict, step: str) -> str:
    return next((f"{r['rows']:,}" for r in res["results"] if r["step"] == step), "?")


def targets(res: dict) -> list[dict]:
    engines = list(dict.fromkeys(r["engine"] for r in res["results"]))
    out = []
    for e in engines:
        x = _s3_ratio(res, e, "initial_load")
        out.append({"target": f"{e}: S3 initial load within {TARGET_S3_RATIO:g}x of the same load to a local directory",
                    "met": x is not None and x <= TARGET_S3_RATIO, "detail": ratio(x) if x else "not measured"})
    return out


def section(res: Optional[dict]) -> list[str]:
    """The report's section for an object-storage result (none without one)."""
    if not res or not (res.get("results") or res.get("failures")):
        return []
    engines = list(dict.fromkeys(r["engine"] for r in res["results"]))
    lines = [HEADING, "",
             f"Measured {res['started']} to {res['finished']} at scale {res['scale']:g}: the initial load "
             f"({_rows(res, 'initial_load')} rows, one WriteBatch) "
             f"and the upsert of {_rows(res, 'upsert')} rows (half new "
             "keys) into it, each engine alone on a fresh server (nothing else of "
             "the benchmark running), first with its warehouse in a local directory, then on a SeaweedFS S3 "
             "server on loopback (delta_destination/tools/s3_server.py, `--warehouse s3://warehouse/...`, the AWS_* variables) "
             "started for this run. Seconds as the client sees the RPC; peak RSS of the server's process tree "
             "(not counting SeaweedFS); CPU s = user+system CPU of the server's process tree during the step (less "
             "sensitive than seconds to other work on the machine); SeaweedFS CPU s = CPU of the SeaweedFS process "
             "during the step, which competes with the engine for the same cores.", "",
             f"Load average (`/proc/loadavg`) before: `{res['loadavg_before']}`; after: `{res['loadavg_after']}` "
             f"({res['nproc']} cores"
             + (": other work was using the cores during the run, so the seconds are inflated by the sharing and "
                "only the S3 / local ratios, measured back to back, are meant for comparison"
                if float(res["loadavg_before"].split()[0]) >= 0.5 * (res["nproc"] or 1) else "") + ").", "",
             "| target | met | measured |", "|---|---|---|"]
    lines += [f"| {t['target']} | {'met' if t['met'] else '**not met**'} | {t['detail']} |" for t in targets(res)]
    lines += ["", "| engine | workload | local s | local rows/s | local peak RSS | local CPU s | S3 s | S3 rows/s | "
              "S3 peak RSS | S3 CPU s | SeaweedFS CPU s | S3 / local |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for e in engines:
        for step in WORKLOADS:
            a, b = _cell(res, e, "local", step), _cell(res, e, "s3", step)
            cells = []
            for r in (a, b):
                cells += ([seconds(r.get("server_s")), rate(r.get("rows_per_s")), gb(r.get("server_peak_rss")),
                           _cpu(r.get("server_cpu_s"))] if r else ["-"] * 4)
            lines.append(f"| {e} | {step} | " + " | ".join(cells) + f" | {_cpu(b.get('s3_server_cpu_s') if b else None)} | "
                         f"{ratio(_s3_ratio(res, e, step))} |")
    checks = [r for r in res["results"] if "rows_table" in r]
    bad = [r for r in checks if r["rows_table"] != r["rows_expected"]]
    if checks:
        lines += ["", "Rows in each table after the upsert (delta-rs): "
                  + "; ".join(f"{r['engine']} {r['storage']}: {r['rows_table']:,}" for r in checks)
                  + f" (expected {checks[0]['rows_expected']:,})" + (" **MISMATCH**" if bad else "")]
    phased = [r for r in res["results"] if r.get("server_phases")]
    if phased:
        lines += ["", "Where the time went: the phases over 2 s the server logged in each request "
                  "(`delta_destination.logs.timed`; the logs do not break down the rest: reading, decrypting and "
                  "parsing the batch files, writing a batch to the staging area with pyarrow, the commit):", ""]
        lines += [f"- {r['engine']} {r['step']} [{r['storage']}]: {', '.join(r['server_phases'])}" for r in phased]
    lines += ["", f"Run by `{res.get('command', '.venv/bin/python -m bench --storage s3')}` (`--storage s3`: this "
              "section alone, put into the existing page; `make bench` runs it after the local workloads)."]
    if res["failures"]:
        lines += ["", "Failures:", ""] + [f"- `{x[:600]}`" for x in res["failures"]]
    return lines + [""]

