"""The object-storage run: the initial load and the 100k upsert into it, on a warehouse in a local
directory and then on each store's server on loopback (S3: SeaweedFS, tools/s3_server;
Azure: Azurite, tools/azure_server; GCS: fake-gcs-server, tools/gcs_server), back to back, one engine at a
time; each RPC timed and the server's process tree sampled as in the local run (steps.Bench with one
engine, no baseline). Each server is given to the destination the way a user would: its standard
environment variables (`env()`), nothing else. Target: the S3 initial load within 1.5x of the same load
to a local directory on the same engine (the emulators of the other stores are not fast enough to be
held to a target: their figures say what works and how far from local it is)."""
from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
from pathlib import Path
from typing import Optional

import psutil

from ..common import data as bd
from .results import gb, rate, ratio, seconds
from ..common.rpc import SCHEMA, create_table, write_batch
from .sampling import tree_cpu
from .steps import Bench
from .workloads import Plan
from tools.azure_server import AzureServer
from tools.gcs_server import GcsServer
from tools.s3_server import S3Server

TARGET_S3_RATIO = 1.5
STORES = {"s3": S3Server, "azure": AzureServer, "gcs": GcsServer}   # the store's name -> its server on loopback
SERVER_NAMES = {"s3": "SeaweedFS", "azure": "Azurite", "gcs": "fake-gcs-server"}
STORE_TITLES = {"s3": "S3", "azure": "Azure", "gcs": "GCS"}
ENGINES_OF = {"gcs": ("spark", "auto")}  # Sail refuses gs:// (docs/object-storage.md); auto sends it to Spark
HEADING = "## Object storage (S3, SeaweedFS on loopback)"


def heading(stores) -> str:
    """The section's heading: the S3-only run keeps its own (its figures are the target's)."""
    stores = tuple(stores)
    if stores == ("s3",):
        return HEADING
    return "## Object storage on every store (" + ", ".join(
        f"{STORE_TITLES[s]}: {SERVER_NAMES[s]}" for s in stores) + ", on loopback)"


def results_name(stores) -> str:
    stores = tuple(stores)
    return "object-storage-results.json" if stores == ("s3",) else f"object-storage-{'-'.join(stores)}-results.json"
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


def _one(args, tmp: Path, p: Plan, engine: str, storage: str, server, out: dict, log) -> None:
    """Both workloads on a fresh server of `engine` with its warehouse on `storage` (`server`: that
    store's server, None for a local directory); rows, events and failures into `out`."""
    bench = Bench(argparse.Namespace(**{**vars(args), "engines": [engine]}), tmp)
    bench.log = log
    if server is not None:
        bench.warehouses[engine] = server.url(f"{tmp.name}/warehouse-{engine}")
        bench.server_env = server.env()
    W, s, f = bd.WIDE, p.sizes, p.files
    rows = []
    try:
        bench.start()
        store_proc = psutil.Process(server.pid) if server is not None else None
        create_table(bench.stub, W)
        for name, group, size in (("initial_load", "init", 0), ("upsert", "upsert", s.base)):
            cpu0 = tree_cpu(store_proc) if store_proc else 0.0
            r = bench.step(f"{name} [{storage}]", rows=s.base if group == "init" else s.batch, specs=f[group],
                           table_size=size, baseline_fn=None,
                           server_fn=lambda g=group, n=name: write_batch(bench.stub, W, replace=f[g], label=n))[engine]
            r.update(storage=storage, step=name,
                     store_server_cpu_s=tree_cpu(store_proc) - cpu0 if store_proc else None)
            rows.append(r)
            if r.get("server_s") is None:
                break
        else:
            path = f"{bench.warehouses[engine]}/{SCHEMA}/{W.name}"
            rows[-1]["rows_table"] = bench.bl.call(
                "count", path=path, storage_options=server.storage_options() if server is not None else None)["rows"]
            rows[-1]["rows_expected"] = s.base + s.batch - s.batch // 2
    finally:
        logs = bench.stop()
        for r, phases in zip(rows, server_phases(logs)):
            r["server_phases"] = phases
        out["results"] += rows
        out["events"] += bench.events
        out["failures"] += bench.failures


def run_object_storage(args, p: Plan, tmp: Path, log, stores=("s3",)) -> dict:
    """Per engine (one at a time): both workloads to a local directory, then to each store in
    `stores` that the engine serves. Each store's server runs for the whole run (started first, so a
    store that cannot start is one failure, not a run without figures); what fails is recorded in
    the result's failures (a full run keeps its local figures)."""
    started = dt.datetime.now(dt.timezone.utc)
    out = {"started": started.isoformat(timespec="seconds"), "loadavg_before": _loadavg(), "nproc": os.cpu_count(),
           "scale": args.scale, "stores": list(stores), "results": [], "events": [], "failures": [],
           "command": " ".join([".venv/bin/python", "-m", "bench", *sys.argv[1:]])}
    servers: dict = {}
    try:
        for store in stores:
            try:
                servers[store] = STORES[store]().start()
                out[f"{store}_started_s"] = round(servers[store].started_in, 1)
                log(f"object storage: {SERVER_NAMES[store]} ({store}) ready in {servers[store].started_in:.1f} s")
            except Exception as exc:  # noqa: BLE001 - that store's server did not start
                out["failures"].append(f"{store} server: {type(exc).__name__}: {str(exc)[:1500]}")
        for engine in args.engines:
            for storage in ("local", *(x for x in stores if x in servers and engine in ENGINES_OF.get(x, (engine,)))):
                sub = tmp / f"os-{engine}-{storage}"
                sub.mkdir()
                log(f"object storage: {engine} on {storage}")
                try:
                    _one(args, sub, p, engine, storage, servers.get(storage), out, log)
                except Exception as exc:  # noqa: BLE001
                    out["failures"].append(f"{engine} on {storage}: {type(exc).__name__}: {str(exc)[:1500]}")
                    log(f"    object storage: {engine} on {storage} FAILED: {str(exc)[:500]}")
        if "s3" in servers:
            out["s3_server_rss_end"] = servers["s3"].rss_bytes()
    finally:
        for server in servers.values():
            server.stop()
    out["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    out["loadavg_after"] = _loadavg()
    return out


# ---- the report's section ---------------------------------------------------------------------------

def _cell(res: dict, engine: str, storage: str, step: str) -> Optional[dict]:
    return next((r for r in res["results"] if r["engine"] == engine and r["storage"] == storage
                 and r["step"] == step), None)


def _store_ratio(res: dict, engine: str, step: str, store: str = "s3") -> Optional[float]:
    a, b = _cell(res, engine, "local", step), _cell(res, engine, store, step)
    return b["server_s"] / a["server_s"] if a and b and a.get("server_s") and b.get("server_s") else None


def _cpu(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1f}"


def _rows(res: dict, step: str) -> str:
    return next((f"{r['rows']:,}" for r in res["results"] if r["step"] == step), "?")


def targets(res: dict) -> list[dict]:
    engines = list(dict.fromkeys(r["engine"] for r in res["results"]))
    out = []
    for e in engines:
        if "s3" not in res.get("stores", ("s3",)):   # the target is S3's (results before 2026-11-28: S3 only)
            continue
        x = _store_ratio(res, e, "initial_load")
        out.append({"target": f"{e}: S3 initial load within {TARGET_S3_RATIO:g}x of the same load to a local directory",
                    "met": x is not None and x <= TARGET_S3_RATIO, "detail": ratio(x) if x else "not measured"})
    return out


def _store_cpu(r: dict) -> Optional[float]:
    return r.get("store_server_cpu_s", r.get("s3_server_cpu_s"))  # the S3-only runs' results say s3_


def section(res: Optional[dict]) -> list[str]:
    """The report's section for an object-storage result (none without one)."""
    if not res or not (res.get("results") or res.get("failures")):
        return []
    stores = tuple(res.get("stores", ("s3",)))
    engines = list(dict.fromkeys(r["engine"] for r in res["results"]))
    servers = "; ".join(f"{STORE_TITLES[x]}: {SERVER_NAMES[x]} (tools/{x}_server.py)" for x in stores)
    lines = [heading(stores), "",
             f"Measured {res['started']} to {res['finished']} at scale {res['scale']:g}: the initial load "
             f"({_rows(res, 'initial_load')} rows, one WriteBatch) "
             f"and the upsert of {_rows(res, 'upsert')} rows (half new "
             "keys) into it, each engine alone on a fresh server (nothing else of "
             "the benchmark running), first with its warehouse in a local directory, then on each store's server on "
             f"loopback, started for this run ({servers}) and given to the destination as its standard "
             "environment variables only (AWS_*; AZURE_STORAGE_* with AZURITE_BLOB_STORAGE_URL; STORAGE_EMULATOR_HOST). "
             + ("GCS is measured on Spark only (Sail refuses gs://: docs/object-storage.md). " if "gcs" in stores else "")
             + "Seconds as the client sees the RPC; peak RSS of the server's process tree "
             "(not counting the store's server); CPU s = user+system CPU of the server's process tree during the step "
             "(less sensitive than seconds to other work on the machine); store CPU s = CPU of the store's server "
             "during the step, which competes with the engine for the same cores.", "",
             f"Load average (`/proc/loadavg`) before: `{res['loadavg_before']}`; after: `{res['loadavg_after']}` "
             f"({res['nproc']} cores"
             + (": other work was using the cores during the run, so the seconds are inflated by the sharing and "
                "only the store / local ratios, measured back to back, are meant for comparison"
                if float(res["loadavg_before"].split()[0]) >= 0.5 * (res["nproc"] or 1) else "") + ").", ""]
    checks = targets(res)
    if checks:
        lines += ["| target | met | measured |", "|---|---|---|"]
        lines += [f"| {t['target']} | {'met' if t['met'] else '**not met**'} | {t['detail']} |" for t in checks]
        lines += [""]
    lines += ["| engine | workload | warehouse | s | rows/s | peak RSS | CPU s | store CPU s | / local |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for e in engines:
        for step in WORKLOADS:
            for storage in ("local", *stores):
                r = _cell(res, e, storage, step)
                if r is None:
                    continue
                x = 1.0 if storage == "local" and r.get("server_s") else _store_ratio(res, e, step, storage)
                lines.append(f"| {e} | {step} | {STORE_TITLES.get(storage, storage)} | {seconds(r.get('server_s'))} | "
                             f"{rate(r.get('rows_per_s'))} | {gb(r.get('server_peak_rss'))} | "
                             f"{_cpu(r.get('server_cpu_s'))} | {_cpu(_store_cpu(r))} | {ratio(x)} |")
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
    flag = ",".join(stores)
    lines += ["", f"Run by `{res.get('command', '.venv/bin/python -m bench --storage ' + flag)}` (`--storage {flag}`: "
              "this section alone, put into the existing page" + ("; `make bench` runs it after the local workloads"
                                                                  if stores == ("s3",) else "") + ")."]
    if res["failures"]:
        lines += ["", "Failures:", ""] + [f"- `{x[:600]}`" for x in res["failures"]]
    return lines + [""]
