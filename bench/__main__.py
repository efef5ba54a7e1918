"""Benchmark: Fivetran-like workloads through the real gRPC server, on each engine, vs a bare delta-rs baseline.

    .venv/bin/python -m bench                         # everything, every engine (make bench); writes docs/benchmarks.md
    .venv/bin/python -m bench --scale 0.01            # every row count x0.01: a quick check
    .venv/bin/python -m bench --only upsert           # one workload (and what it needs first)
    .venv/bin/python -m bench --only upsert,narrow_load,growth   # several
    .venv/bin/python -m bench --skip-growth           # without the 1M/3M/10M growth runs
    .venv/bin/python -m bench --engines auto          # one engine (default: auto,sail,spark side by side)
    .venv/bin/python -m bench --storage s3            # only the object-storage run, into the existing report
    .venv/bin/python -m bench --storage s3,azure,gcs --engines sail,spark   # every store (make bench-stores)
    .venv/bin/python -m bench --cluster               # only the cluster run (make bench-cluster), likewise

After the local workloads (whose servers are stopped by then), the object-storage run
(bench/growth/object_storage.py) measures the initial load and the upsert again on each engine
alone, to a local directory and then to a SeaweedFS S3 server on loopback, back to back;
`--storage local` skips it, `--storage s3` runs only it and puts its section into the existing
benchmarks.md (the rest of the file is left as it is) with its figures in object-storage-results.json;
`--storage s3,azure,gcs` (any of them) does the same on each store's emulator, in a section of its own.
`--cluster` (bench/growth/cluster.py) starts the local cluster (tools/local_cluster) and measures the
100k upsert into a 1M-row and a 10M-row table through it and through the local Spark engine; its
section goes into the existing benchmarks.md the same way (figures in cluster-results.json).

The engines: `auto` is the destination's default, measured as a user gets it: its server is
started WITHOUT an --engine flag (the engine `make run` serves without ENGINE=), and it runs each
request on embedded Sail unless Sail cannot serve it (a MERGE estimated over the memory budget),
then on a local Spark JVM the server starts when needed; which engine served each step is read from the
server's log and reported. `sail` and `spark` are the engines named explicitly (--engine E).

Workload files are generated once per (seed, scale) under bench-data/ (encrypted
zstd CSV in Fivetran's conventions, see bench/common/data.py) and reused.  Each
engine gets its own server subprocess (`python -m delta_destination.doors.fivetran.main
[--engine E]`) on a free port with its own temporary warehouse; the RSS and CPU of
its process tree (for Spark, and for auto while it keeps one: the server plus the Spark Connect
JVM it starts) are sampled every 0.1 s and each RPC is timed.  Every step runs on each engine in
turn, then ONCE on the baseline (bench/common/baseline.py), which applies the
identical files with the destination's batch-file reader + delta-rs in a separate
worker process, sampled the same way.  A full run (scale 1, all workloads, every
engine) writes docs/benchmarks.md, docs/bench-results.json and
docs/bench-growth.png; partial runs write to bench-data/report/ instead.

The parts: runner.py (a whole run), workloads.py (what each workload sends),
steps.py (servers, baseline, measured steps), sampling.py (RSS and CPU of process trees),
rpc.py (the calls), profiles.py (pyinstrument phases), targets.py, plot.py and
report.py (judging and writing up a result, which results.py reads).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from testkit.server_process import ROOT

from .growth.cluster import section as cluster_section
from .growth.object_storage import STORES, results_name, section
from .growth.object_storage import targets as object_storage_targets
from .growth.plot import plot
from .growth.report import write_report
from .common.report_sections import splice
from .growth.runner import DATA_ROOT, run
from .growth.targets import evaluate_targets
from .growth.workloads import WORKLOADS

DOCS = ROOT / "docs"
ENGINE_CHOICES = ("auto", "sail", "spark")  # auto: the default (its server has no --engine flag)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every row count (e.g. 0.01 for a quick check)")
    ap.add_argument("--only", default=None, metavar="W[,W...]",
                    help=f"run these workloads (and the ones they need first); one or more of {', '.join(WORKLOADS)}")
    ap.add_argument("--skip-growth", action="store_true", help="skip the 1M/3M/10M growth runs")
    ap.add_argument("--engines", default=",".join(ENGINE_CHOICES),
                    help="comma-separated engines to measure side by side (auto = the default engine, started "
                         "without --engine; sail; spark); default: all three")
    ap.add_argument("--storage", default="both", metavar="both|local|STORE[,STORE...]",
                    help="local: the local workloads only; s3 (or any of s3,azure,gcs): only the object-storage run "
                         "(local vs each store's emulator, initial load and upsert); both (default): the local "
                         "workloads, then the object-storage run on S3")
    ap.add_argument("--cluster", action="store_true",
                    help="only the cluster run: the upsert at 1M and 10M rows on the local cluster and the local engine")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--no-profile", action="store_true", help="skip the pyinstrument pass")
    ap.add_argument("--rss-cap-gb", type=float, default=8.0,
                    help="kill the server / baseline worker above this RSS (protects the shared machine)")
    ap.add_argument("--keep", action="store_true", help="keep the run's warehouse, baseline tables and server log")
    ap.add_argument("--out", type=Path, default=None,
                    help="report directory (default: docs/ for a full run, bench-data/report/ otherwise)")
    ap.add_argument("--report-only", type=Path, default=None, metavar="JSON",
                    help="re-render the report from a saved bench-results.json (no measurement)")
    args = ap.parse_args(argv)
    if args.only is not None:
        args.only = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = [w for w in args.only if w not in WORKLOADS]
        if unknown or not args.only:
            ap.error(f"--only: a comma-separated list of {', '.join(WORKLOADS)}, got {unknown or args.only}")
    if args.storage in ("both", "local"):
        args.stores = ("s3",) if args.storage == "both" else ()
    else:
        args.stores = tuple(dict.fromkeys(x.strip() for x in args.storage.split(",") if x.strip()))
        if not args.stores or set(args.stores) - STORES.keys():
            ap.error(f"--storage: both, local or a comma-separated list of {', '.join(STORES)}, got {args.storage!r}")
        args.storage = "stores"
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    bad = [e for e in args.engines if e not in ENGINE_CHOICES]
    if bad or not args.engines or len(set(args.engines)) != len(args.engines):
        ap.error(f"--engines: a comma-separated list of {', '.join(ENGINE_CHOICES)} without repeats, "
                 f"got {bad or args.engines}")
    return args


def report_dir(args: argparse.Namespace) -> Path:
    """docs/ for a full run (scale 1, every workload, every engine; with --storage STORES: scale 1, every
    engine), else bench-data/report/ (or --out)."""
    full = (args.scale == 1.0 and set(args.engines) == set(ENGINE_CHOICES)
            and (args.storage == "stores" or args.cluster or (args.storage == "both" and not args.only and not args.skip_growth)))
    return args.out or (DOCS if full else DATA_ROOT / "report")


def section_only(args: argparse.Namespace, results_name: str, section_of, targets_of=None) -> int:
    """--storage s3 / --cluster: that run alone (or its saved result with --report-only); its figures
    in `results_name` and its section spliced into the report directory's benchmarks.md."""
    res = json.loads(args.report_only.read_text()) if args.report_only else run(args)
    out = report_dir(args)
    out.mkdir(parents=True, exist_ok=True)
    (out / results_name).write_text(json.dumps(res, indent=1, default=str) + "\n")
    lines = section_of(res)
    splice(out / "benchmarks.md", lines)
    print(f"\nreport: {out / 'benchmarks.md'} (section {lines[0][3:]!r})")
    for t in targets_of(res) if targets_of else []:
        print(f"  [{'met' if t['met'] else 'NOT MET'}] {t['target']}: {t['detail']}")
    for x in res["failures"]:
        print("  failure: " + x[:500])
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cluster:
        return section_only(args, "cluster-results.json", cluster_section)
    if args.storage == "stores":
        return section_only(args, results_name(args.stores), section, object_storage_targets)
    res = json.loads(args.report_only.read_text()) if args.report_only else run(args)
    out = report_dir(args)
    out.mkdir(parents=True, exist_ok=True)
    png = out / "bench-growth.png"
    has_png = plot(res, png)
    (out / "bench-results.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    path = write_report(res, out, png if has_png else None)
    print(f"\nreport: {path}")
    for t in evaluate_targets(res) + (object_storage_targets(res["object_storage"]) if res.get("object_storage") else []):
        print(f"  [{'met' if t['met'] else 'NOT MET'}] {t['target']}: {t['detail']}")
    if res["failures"]:
        print("failures:")
        for x in res["failures"]:
            print("  " + x[:500])
    return 0


if __name__ == "__main__":
    sys.exit(main())
