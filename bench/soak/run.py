"""Soak: one destination process fed thousands of small batches for many tables, as production
runs it, with its memory over time, every request's latency, its engine restarts, and every table
checked against an independent reader (delta-rs) at the end.

    .venv/bin/python -m bench.soak                         # make bench-soak: all three doors, full size
    .venv/bin/python -m bench.soak --doors fivetran --rounds 60 --no-save    # a quick look
    .venv/bin/python -m bench.soak --doors fivetran --compare-with 5c555de --rounds 150
                                                           # per-request cost: that commit's server and
                                                           # this one, back to back, same workload

- fivetran: a server started as `make run` starts it (no engine flag: the default engine), `tables`
  tables with an initial load each, then `rounds` rounds of DescribeTable + one WriteBatch per table
  (Shape: 40 upserts of which half new keys, 8 partial updates, 2 deletes), `in_flight` requests at a
  time (one table is never written by two requests at once, as Fivetran does).
- airbyte: one `airbyte-delta-destination write` whose records for `tables` streams are each followed
  by a STATE message (each a commit), `rounds` times per stream.
- conduit: the real Conduit (`make conduit`) running a generator source into the connector: `records`
  records in batches of `batch` (each a commit); with --backlog, `records` offered to the connector as fast
  as gRPC takes them (the plugin handshake played by testkit/conduit_host.py), in commits of `batch`.

Memory is the PSS of the process tree (the door process, its Sail engine process(es)), sampled every
few seconds with the number of requests done; the engine's restarts come from the door's own
metrics endpoint (--metrics-port). Results go to docs/soak-results.json and docs/benchmarks.md
(section "Soak"), the memory plot to docs/soak-memory.png.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

import grpc
import psutil

from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from testkit.server_process import ROOT, RunningServer, free_port

from ..common.process_memory import MemorySampler
from ..common.door_measures import latency_summary, memory_summary, replacements_per_1000, restarts, scrape
from ..common.small_batches import Shape, SmallBatches

DOCS = ROOT / "docs"
RESULTS = DOCS / "soak-results.json"
SCHEMA = "soak"
RPC_TIMEOUT = 600


# ---- the Fivetran door ---------------------------------------------------------------------------

class FivetranSoak:
    def __init__(self, work: Path, tables: int, rounds: int, in_flight: int, shape: Shape,
                 server_root: Path = ROOT, label: str = "this checkout", env: Optional[dict] = None,
                 sample_seconds: float = 5.0):
        """`env`: more of the server's environment (e.g. DELTA_DESTINATION_ENGINE_MAX_MEMORY_MB)."""
        self.work, self.tables, self.rounds, self.in_flight, self.shape = work, tables, rounds, in_flight, shape
        self.server_root, self.label, self.env, self.sample_seconds = server_root, label, env or {}, sample_seconds
        if server_root != ROOT:
            self.env = {"PYTHONPATH": str(server_root), **self.env}
        self.latency: dict[str, list[float]] = {"WriteBatch": [], "DescribeTable": [], "CreateTable": []}
        self.failures: list[str] = []
        self.done = 0
        self._lock = threading.Lock()

    def _launcher(self, warehouse: Path):
        if self.server_root == ROOT:   # exactly what a user types
            return lambda port: ["make", "--no-print-directory", "run", f"PORT={port}", f"WAREHOUSE={warehouse}"]
        # Another checkout's package (first on its PYTHONPATH, see __init__), with this venv's libraries;
        # an older layout has the doors at the package top.
        door = ("delta_destination.doors.fivetran.main" if (self.server_root / "delta_destination" / "doors").exists()
                else "delta_destination.fivetran.main")
        return lambda port: [sys.executable, "-m", door, "--port", str(port), "--warehouse", str(warehouse)]

    def _timed(self, kind: str, call, req):
        began = time.monotonic()
        try:
            resp = call(req, timeout=RPC_TIMEOUT)
        except grpc.RpcError as exc:
            with self._lock:
                self.failures.append(f"{kind}: {exc.code().name}: {exc.details()}")
            return None
        took = time.monotonic() - began
        if resp.HasField("task") if "task" in resp.DESCRIPTOR.fields_by_name else False:
            with self._lock:
                self.failures.append(f"{kind}: task: {resp.task.message}")
        with self._lock:
            self.latency[kind].append(took)
        return resp

    def run(self) -> dict:
        warehouse = self.work / "warehouse"
        batches = SmallBatches(self.work / "batches", self.tables, self.shape)
        metrics_port = free_port()
        srv = RunningServer(warehouse, self.work / "server.log", launcher=self._launcher(warehouse),
                            env={"DELTA_DESTINATION_METRICS_PORT": f"127.0.0.1:{metrics_port}", **self.env},
                            cwd=self.server_root)
        sampler = MemorySampler(psutil.Process(srv.proc.pid), lambda: self.done, self.sample_seconds).start()
        began = time.monotonic()
        try:
            for feed in batches.feeds:
                self._timed("CreateTable", srv.stub.CreateTable,
                            pb.CreateTableRequest(schema_name=SCHEMA, table=feed.proto))
                req = feed.initial(SCHEMA)
                self._timed("WriteBatch", srv.stub.WriteBatch, req)
                feed.remove_files(req)
            self.latency["WriteBatch"].clear()   # the incremental batches are what is measured

            def worker(w: int):
                mine = batches.feeds[w::self.in_flight]
                for _ in range(self.rounds):
                    for feed in mine:
                        self._timed("DescribeTable", srv.stub.DescribeTable,
                                    pb.DescribeTableRequest(schema_name=SCHEMA, table_name=feed.name))
                        req = feed.incremental(SCHEMA)
                        self._timed("WriteBatch", srv.stub.WriteBatch, req)
                        feed.remove_files(req)
                        with self._lock:
                            self.done += 1

            threads = [threading.Thread(target=worker, args=(w,)) for w in range(self.in_flight)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            seconds = time.monotonic() - began
            metrics = scrape(metrics_port)
            sampler.stop()
        finally:
            srv.stop()
        problems = batches.problems(str(warehouse), SCHEMA)
        batches.cleanup()
        total = self.tables * self.rounds
        return {
            "door": "fivetran", "label": self.label, "tables": self.tables, "rounds": self.rounds,
            "in_flight": self.in_flight, "write_batches": total, "seconds": round(seconds, 1),
            "latency": {k: latency_summary(v) for k, v in self.latency.items()},
            "memory": memory_summary(sampler, min(500, total)),
            "engine_restarts": restarts(metrics),
            "failed_requests": len(self.failures), "failures": self.failures[:10],
            "tables_equal_to_model": not problems, "problems": problems[:10],
        }


# ---- the report ----------------------------------------------------------------------------------

def save(result: dict) -> None:
    """Merged into docs/soak-results.json by door and label (a newer run replaces an older one)."""
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    results = [r for r in results if (r["door"], r.get("label")) != (result["door"], result.get("label"))]
    results.append({**result, "date": time.strftime("%Y-%m-%d")})
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")


def print_result(r: dict) -> None:
    m = r["memory"]
    print(f"{r['door']} ({r.get('label', '')}): {r.get('write_batches', r.get('commits'))} commits in {r['seconds']} s; "
          f"latency {json.dumps(r.get('latency', {}))}; PSS {m['pss_at_checkpoint_mib']} MiB after "
          f"{m['checkpoint_requests']}, {m['pss_end_mib']} MiB at the end (x{m['end_over_checkpoint']}), peak "
          f"{m['pss_peak_mib']} MiB; restarts {r['engine_restarts']} ({replacements_per_1000(r):.1f} per 1,000 "
          f"requests), connector warnings {r.get('connector_warnings', '-')}; failures {r['failed_requests']}; tables equal: "
          f"{r['tables_equal_to_model']}; at the end by process: {m['end_by_role_mib']}", flush=True)
    for s in m["series"][:: max(1, len(m["series"]) // 12)]:
        print(f"    {s[0]:7.1f} s  {s[1]:6d} done  tree {s[2]:7.1f} MiB  door {s[3]:7.1f}  engine {s[4]:7.1f}", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--doors", default="fivetran,airbyte,conduit")
    ap.add_argument("--tables", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=500, help="fivetran: incremental batches per table")
    ap.add_argument("--airbyte-rounds", type=int, default=300, help="airbyte: STATE-ended batches per stream")
    ap.add_argument("--in-flight", type=int, default=4)
    ap.add_argument("--records", type=int, default=20_000, help="conduit: generator records")
    ap.add_argument("--batch", type=int, default=100, help="conduit: records per commit")
    ap.add_argument("--compare-with", metavar="REV", help="fivetran, conduit: also run this commit's server or "
                    "connector, first (same workload, back to back)")
    ap.add_argument("--label", default="", help="conduit: what the run is (default: generator pipeline, or "
                    "N-record backlog)")
    ap.add_argument("--backlog", action="store_true", help="conduit: offer --records to the connector as fast as "
                    "gRPC takes them (through the plugin handshake, no Go), in commits of --batch")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--no-save", action="store_true", help="print only (docs/ untouched)")
    return ap.parse_args(argv)


def checkout(rev: str, work: Path) -> Path:
    """A worktree of `rev` (its package is what a server started there imports)."""
    path = work / f"soak-{rev}"
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], cwd=ROOT, check=True,
                       capture_output=True)
        # Generated stubs and fetched jars are not in git: the old checkout uses this one's (same
        # protocol files; the same engines installed, so that auto chooses the same way).
        for stubs in ("delta_destination/doors/fivetran/_proto", "delta_destination/doors/conduit/_proto"):
            there = path / stubs
            if not there.exists():       # an older layout: the doors at the package top
                there = path / stubs.replace("doors/", "")
            for f in (ROOT / stubs).iterdir():
                target = there / f.name
                if not target.exists():
                    target.symlink_to(f)
        for jars in (".spark-jars", ".hive-client-jars", ".metastore-jars"):
            if (ROOT / jars).exists() and not (path / jars).exists():
                (path / jars).symlink_to(ROOT / jars)
    return path


def main(argv=None) -> int:
    args = parse_args(argv)
    doors = [d.strip() for d in args.doors.split(",") if d.strip()]
    shape = Shape()
    results = []
    work = Path(tempfile.mkdtemp(prefix="soak-", dir=args.work))
    if "fivetran" in doors:
        label = "this checkout"
        if args.compare_with:
            old = checkout(args.compare_with, work)
            results.append(FivetranSoak(work / "old", args.tables, args.rounds, args.in_flight, shape, old,
                                        label=f"at {args.compare_with}, side by side").run())
            print_result(results[-1])
            label = "this checkout, side by side"
        results.append(FivetranSoak(work / "new", args.tables, args.rounds, args.in_flight, shape, label=label).run())
        print_result(results[-1])
    if "airbyte" in doors:
        from .doors import airbyte_soak

        results.append(airbyte_soak(work / "airbyte", args.tables, args.airbyte_rounds))
        print_result(results[-1])
    if "conduit" in doors:
        from .doors import conduit_backlog_soak, conduit_soak

        soak = conduit_backlog_soak if args.backlog else conduit_soak
        label = args.label or (f"{args.records:,}-record backlog" if args.backlog else "generator pipeline")
        if args.compare_with:
            old = checkout(args.compare_with, work)
            results.append(soak(work / "conduit-old", args.records, args.batch,
                                label=f"{label}, at {args.compare_with}", connector_root=old))
            print_result(results[-1])
        results.append(soak(work / "conduit", args.records, args.batch, label=label))
        print_result(results[-1])
    if not args.no_save:
        for r in results:
            save(r)
        from .report import write_section

        write_section(json.loads(RESULTS.read_text()))
    failed = [r for r in results if r["failed_requests"] or not r["tables_equal_to_model"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
