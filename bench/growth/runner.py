"""One whole benchmark run: the workloads' files, the processes (steps.Bench), the workloads,
the profiles, and the result as bench-results.json holds it."""
from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import psutil

from ..common import data as bd
from .cluster import run_cluster
from .object_storage import run_object_storage
from .profiles import run_profiles
from .results import GB
from .steps import Bench
from .workloads import Plan, plan, run_workloads, selected_chain
from testkit.server_process import ROOT

DATA_ROOT = ROOT / "bench-data"


def machine_facts() -> dict:
    """The machine, the package versions and the code the run measured."""
    return {
        "git": _git_facts(),
        "nproc": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / GB, 1), "cpu": _cpu_model(),
        "kernel": platform.release(), "python": platform.python_version(), "versions": _versions(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def _versions() -> dict:
    versions = {}
    for pkg in ("pyspark", "pyspark-client", "delta-spark", "pysail", "deltalake", "pyarrow", "grpcio", "zstandard",
                "cryptography", "numpy"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return versions


def _git_facts() -> dict:
    git = {}
    try:
        git["head"] = subprocess.run(["git", "log", "-1", "--format=%h %s"], cwd=ROOT, capture_output=True,
                                     text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "delta_destination"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.split("\n")
        git["server_changes"] = [ln[3:] for ln in dirty if ln.strip()]
    except (OSError, subprocess.SubprocessError):
        pass
    return git


def _profiles(bench: Bench, p: Plan) -> dict:
    f = p.files
    if bench.args.no_profile or "init" not in f or "upsert" not in f or "sail" not in bench.engines:
        return {}
    try:
        return run_profiles(bench.tmp, f, bench.log)
    except Exception as e:  # noqa: BLE001
        return {"error": str(e)}


def _result(bench: Bench, p: Plan, **figures) -> dict:
    a = bench.args
    return {
        **figures,
        "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([".venv/bin/python", "-m", "bench", *sys.argv[1:]]),
        "scale": a.scale, "seed": a.seed, "engines": bench.engines,
        "spark_driver_memory": os.environ.get("DELTA_DESTINATION_SPARK_DRIVER_MEMORY", "1536m"),
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "server_startup_s": {e: bench.startup[e][0] for e in bench.engines}, "server_restarts_s": bench.startup,
        "results": bench.results, "setup": bench.setup, "failures": bench.failures, "events": bench.events,
        "rss_cap_gb": a.rss_cap_gb, "run_minutes": round((time.monotonic() - bench.t0) / 60, 1),
        "files": {k: {"files": len(v), "rows": sum(s.rows for s in v), "bytes": sum(s.bytes for s in v)}
                  for k, v in p.files.items()},
    }


def run(args) -> dict:
    """The whole run; the result (what bench-results.json holds). `--storage s3`: the object-storage
    run alone (object_storage.py; `--storage s3,azure,gcs`: on those stores); its result."""
    started = dt.datetime.now(dt.timezone.utc)
    DATA_ROOT.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="run-", dir=DATA_ROOT))
    try:
        bench = Bench(args, tmp)
        gen = bd.Generator(DATA_ROOT, args.seed, args.scale)
        only = ("growth" if getattr(args, "cluster", False)  # the cluster run: the growth table's files
                else "upsert" if args.storage == "stores" else args.only)  # the stores' run: the initial load and the upsert
        where = "the local cluster, then the local Spark engine" if getattr(args, "cluster", False) \
            else ", ".join(bench.engines)
        bench.log(f"workloads: {', '.join(selected_chain(only, args.skip_growth))} on {where} "
                  f"(scale {args.scale:g}, seed {args.seed})")
        bench.log(f"generating / reusing batch files under {gen.dir}")
        t = time.monotonic()
        p = plan(gen, only, args.skip_growth)
        gen_s = time.monotonic() - t
        if getattr(args, "cluster", False):
            return run_cluster(args, p, tmp, bench.log)
        if args.storage == "stores":
            return run_object_storage(args, p, tmp, bench.log, args.stores)
        facts = machine_facts()
        idle_rss, tree = bench.start()
        try:
            run_workloads(bench, p)
        finally:
            server_log = bench.stop()
        profiles = _profiles(bench, p)
        # after the local run's servers are stopped: one engine at a time, local then S3
        object_storage = (run_object_storage(args, p, tmp, bench.log)
                          if args.storage == "both" and {"init", "upsert"} <= p.files.keys() else None)
        return _result(bench, p, object_storage=object_storage, started=started.isoformat(timespec="seconds"), machine=facts,
                       generate_s=round(gen_s, 1), generation=gen.meta, server_idle_rss=idle_rss, server_tree=tree,
                       server_severe_log=[ln for ln in server_log.splitlines() if '"SEVERE"' in ln][-20:],
                       profiles=profiles)
    finally:
        if args.keep:
            print(f"kept {tmp}", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
