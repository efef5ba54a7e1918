"""Increments into big tables: what a small WriteBatch costs as its table grows (issue 35, item 5).

    .venv/bin/python -m bench.increments                              # make bench-increments
    .venv/bin/python -m bench.increments --sizes 1M,3M --engines auto --baseline-commit 87311fd

For each engine setting (`auto`: the server as `make run` starts it, no engine flag; `spark`: with
`--engine spark`), one server and one 20-column table (bench/common/data.py's wide table, LONG key `id`),
grown by 1M-row WriteBatch requests of new keys to each of `--sizes`; at each size, one request at a
time, `--repeat` (5) requests of each kind:

- uniform: an upsert of 100 rows, 50 updates of existing keys spread uniformly over the table + 50 new keys;
- recent: the same with its 50 updates among the newest 5% of rows (the common case of a growing table);
- partial: 20 partial updates (an update file with unmodified markers) + 5 deletes, keys uniform.

Per request: its latency, and from the Delta log's commits it made (read as JSON here): files removed,
files added, bytes added (the sum of add.size, as the log says it), bytes written (new data files plus
deletion vectors: a file re-added with a deletion vector is not written again), rows copied
(numTargetRowsCopied), deletion vectors added, the engine that wrote it (commitInfo.engineInfo).
Write amplification = bytes written / the Arrow bytes of the batch. The floor: the same batches applied
by delta-rs alone (bench/common/baseline.py: cryptography, zstandard, pyarrow.csv, one `DeltaTable.merge`) on
a copy of the table taken before the increments. Memory: the PSS of the server's process tree
(bench/common/process_memory.py), peak per size.

`--baseline-commit SHA` runs the same workload, same batches, against another checkout too (a detached
`git worktree` at /work/wt-<sha>, the server on PYTHONPATH=that checkout, this venv), so before and
after come from one run. Results: docs/increments-results.json (replaced per (code, engine)) and a
markdown table printed at the end (`--print` prints it from the saved results alone).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import psutil

from delta_destination.core.model import TableSchema
from testkit.bench_keys import keyed_rng
from testkit.server_process import ROOT, RunningServer

from ..common import data as bd
from ..common import rpc
from ..common.baseline import Baseline, BaselineFailed, BaselineProc, file_refs
from ..common.process_memory import MIB, MemorySampler
from ..common.door_measures import percentile

DOCS = ROOT / "docs"
RESULTS = DOCS / "increments-results.json"
TABLE = TableSchema("increments", bd.WIDE.columns)
FLOOR_TABLE = "wide"           # the same columns, as bench/common/baseline.py knows them
GROW_ROWS = 1_000_000
SEED = 35
KINDS = ("uniform", "recent", "partial")


def parse_size(s: str) -> int:
    """'200k' -> 200000, '1M' -> 1000000, '10m' -> 10000000, '1500' -> 1500.

    >>> [parse_size(x) for x in ("200k", "1M", "3m", "1500")]
    [200000, 1000000, 3000000, 1500]
    """
    s = s.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def size_label(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


# ---- the Delta log ---------------------------------------------------------------------------------

def log_version(table_path: Path) -> int:
    """The newest commit's version (-1: no table yet)."""
    versions = [int(p.name[:20]) for p in (table_path / "_delta_log").glob("*.json") if p.name[:20].isdigit()]
    return max(versions, default=-1)


def commit_figures(table_path: Path, after: int) -> dict:
    """What the commits after version `after` did, summed: read from their JSON actions.

    A file re-added with a deletion vector (remove P, add P + DV) is not new data: `bytes_written`
    counts new data files and the deletion vectors' own bytes; `bytes_added` is the log's add.size sum."""
    out = {"commits": 0, "files_removed": 0, "files_added": 0, "bytes_added": 0, "bytes_written": 0,
           "rows_copied": 0, "dvs_added": 0, "scan_ms": 0, "rewrite_ms": 0, "operations": [], "engines": []}
    for v in range(after + 1, log_version(table_path) + 1):
        path = table_path / "_delta_log" / f"{v:020d}.json"
        actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        removed = {a["remove"]["path"] for a in actions if "remove" in a}
        out["commits"] += 1
        out["files_removed"] += len(removed)
        for a in actions:
            if "add" in a:
                add = a["add"]
                dv = add.get("deletionVector")
                out["files_added"] += 1
                out["bytes_added"] += int(add.get("size") or 0)
                if dv:
                    out["dvs_added"] += 1
                    out["bytes_written"] += int(dv.get("sizeInBytes") or 0)
                if add["path"] not in removed or not dv:
                    out["bytes_written"] += int(add.get("size") or 0)
            elif "commitInfo" in a:
                ci = a["commitInfo"]
                out["operations"].append(ci.get("operation"))
                out["engines"].append(ci.get("engineInfo") or ci.get("clientVersion"))
                metrics = ci.get("operationMetrics") or {}
                out["rows_copied"] += int(metrics.get("numTargetRowsCopied") or 0)
                # Delta on Spark's own split of a MERGE (Sail's log has no such metrics): how long it
                # scanned the target for matches, how long it wrote.
                out["scan_ms"] += int(metrics.get("scanTimeMs") or 0)
                out["rewrite_ms"] += int(metrics.get("rewriteTimeMs") or 0)
    return out


# ---- the workload ------------------------------------------------------------------------------------

@dataclass
class Request:
    kind: str
    replace: list
    update: list
    delete: list
    arrow_bytes: int = 0


class Keys:
    """The table's keys as the workload made them: 0..top-1, minus those it deleted."""

    def __init__(self):
        self.top = 0
        self.deleted: set[int] = set()

    def new(self, n: int) -> np.ndarray:
        ids = np.arange(self.top, self.top + n, dtype=np.int64)
        self.top += n
        return ids

    def existing(self, rng: np.random.Generator, n: int, low: int = 0) -> np.ndarray:
        out: list[int] = []
        while len(out) < n:
            k = int(rng.integers(low, self.top))
            if k not in self.deleted and k not in out:
                out.append(k)
        return np.array(out, dtype=np.int64)


class Workload:
    """The batch files, the same for every run (cached under `cache`: keys and values come from the seed)."""

    def __init__(self, cache: Path, sizes: list[int], repeat: int):
        self.gen = bd.Generator(cache, SEED, 1.0)
        self.sizes, self.repeat = sizes, repeat
        self.reader = Baseline()

    def arrow_bytes(self, specs, update: bool) -> int:
        if not specs:
            return 0
        values, _ = self.reader._read(FLOOR_TABLE, file_refs(specs), allow_unmodified=update)
        return values.nbytes

    def plan(self):
        """[(size, [growth request files], {kind: [Request]})] in the order the run sends them."""
        keys, step, out = Keys(), 1, []
        for size in self.sizes:
            grow = []
            while keys.top < size:
                n = min(GROW_ROWS, size - keys.top)
                grow.append(self.gen.wide_rows(f"grow-{keys.top}-{n}", keys.new(n), step))
                step += 1
            kinds: dict[str, list[Request]] = {k: [] for k in KINDS}
            for kind in KINDS:
                for i in range(self.repeat):
                    name = f"{kind}-{size_label(size)}-{i}"
                    rng = keyed_rng(SEED, name, 0)
                    if kind == "partial":
                        upd = keys.existing(rng, 20)
                        dels = keys.existing(rng, 5)
                        keys.deleted.update(int(k) for k in dels)
                        req = Request(kind, [], self.gen.wide_rows(f"{name}-u", upd, step, kind="update", unmod_frac=0.7),
                                      self.gen.keys_only(f"{name}-d", dels, step, "delete",
                                                         {"_fivetran_synced": bd.sync_ms(step)}))
                        req.arrow_bytes = self.arrow_bytes(req.update, True) + self.arrow_bytes(req.delete, False)
                    else:
                        low = int(keys.top * 0.95) if kind == "recent" else 0
                        ids = np.concatenate([keys.existing(rng, 50, low), keys.new(50)])
                        req = Request(kind, self.gen.wide_rows(name, rng.permutation(ids), step), [], [])
                        req.arrow_bytes = self.arrow_bytes(req.replace, False)
                    step += 1
                    kinds[kind].append(req)
            out.append((size, grow, kinds))
        return out


# ---- one run: one checkout, one engine setting --------------------------------------------------------

def checkout(sha: str) -> Path:
    """A detached worktree of `sha` with this checkout's generated protobuf modules (not tracked by git)."""
    full = subprocess.run(["git", "rev-parse", sha], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    where = Path(f"/work/wt-{full[:7]}")
    if not where.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(where), full], cwd=ROOT, check=True,
                       capture_output=True)
    # What `make install` fetched beside the package (its Spark jars above all: without them the old
    # server's auto finds no local Spark and keeps every table on the embedded engine).
    for fetched in (".spark-jars", ".metastore-jars", ".hive-client-jars", ".tools"):
        if (ROOT / fetched).exists() and not (where / fetched).exists():
            (where / fetched).symlink_to((ROOT / fetched).resolve())
    for proto in ("delta_destination/doors/fivetran/_proto", "delta_destination/doors/conduit/_proto"):
        src, dst = ROOT / proto, where / proto
        if src.exists() and dst.exists():
            for f in src.iterdir():
                if f.is_file() and not (dst / f.name).exists():
                    shutil.copy2(f, dst / f.name)
                elif f.is_dir() and not (dst / f.name).exists():
                    shutil.copytree(f, dst / f.name)
    return where


def server_commit(root: Path) -> str:
    """The newest commit of that checkout that changed the server's package (what the run measures)."""
    return subprocess.run(["git", "log", "-1", "--format=%h", "--", "delta_destination"], cwd=root,
                          capture_output=True, text=True).stdout.strip()


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class Run:
    def __init__(self, engine: str, code: str, server_root: Path, work: Path, floor: bool):
        self.engine, self.code, self.server_root, self.work, self.floor = engine, code, server_root, work, floor
        self.phase = 0
        self.on_size = None    # called with the result so far after each size

    def launcher(self, warehouse: Path):
        # What `make run` runs (the console script's module, `--engine auto` when no ENGINE is given), from
        # `server_root`'s package on PYTHONPATH with this venv: a make target would reinstall the venv.
        engine = ["--engine", "spark"] if self.engine == "spark" else ["--engine", "auto"]
        return lambda port: [sys.executable, "-m", "delta_destination.doors.fivetran.main", "--port", str(port),
                             "--warehouse", str(warehouse), *engine]

    def go(self, plan) -> dict:
        self.work.mkdir(parents=True, exist_ok=True)
        warehouse = self.work / "warehouse"
        table_path = warehouse / rpc.SCHEMA / TABLE.name
        env = {"PYTHONPATH": str(self.server_root)}
        print(f"== {self.code} / {self.engine}: server from {self.server_root}, load {load()}", flush=True)
        srv = RunningServer(warehouse, self.work / "server.log", launcher=self.launcher(warehouse), env=env,
                            cwd=self.server_root, ready_timeout=300)
        sampler = MemorySampler(psutil.Process(srv.proc.pid), lambda: self.phase, 2.0).start()
        sizes = []
        try:
            rpc.create_table(srv.stub, TABLE)
            for si, (size, grow, kinds) in enumerate(plan):
                self.phase = 2 * si + 1
                r = {"size": size, "load_before": load(), "grow": []}
                for files in grow:
                    began = time.monotonic()
                    before = log_version(table_path)
                    rpc.write_batch(srv.stub, TABLE, replace=files, label="grow")
                    r["grow"].append({"seconds": round(time.monotonic() - began, 2),
                                      **commit_figures(table_path, before)})
                    print(f"  grow to {size_label(size)}: {r['grow'][-1]['seconds']} s", flush=True)
                r["table_files"] = active_files(table_path)
                floor_copy = None
                if self.floor:
                    floor_copy = self.work / f"floor-{size_label(size)}"
                    shutil.rmtree(floor_copy, ignore_errors=True)
                    shutil.copytree(table_path, floor_copy)
                self.phase = 2 * si + 2
                r["kinds"] = {}
                for kind, reqs in kinds.items():
                    per = []
                    for req in reqs:
                        before = log_version(table_path)
                        began = time.monotonic()
                        rpc.write_batch(srv.stub, TABLE, replace=req.replace, update=req.update, delete=req.delete,
                                        label=kind)
                        seconds = time.monotonic() - began
                        figs = commit_figures(table_path, before)
                        per.append({"seconds": round(seconds, 3), "arrow_bytes": req.arrow_bytes, **figs,
                                    "write_amplification": round(figs["bytes_written"] / req.arrow_bytes, 1)})
                        print(f"  {size_label(size)} {kind}: {seconds:.2f} s, removed {figs['files_removed']}, "
                              f"added {figs['files_added']}, copied {figs['rows_copied']}, "
                              f"written {figs['bytes_written'] / MIB:.1f} MiB, dvs {figs['dvs_added']}, "
                              f"{figs['engines'][-1:]}", flush=True)
                    r["kinds"][kind] = {"requests": per, **summary(per)}
                r["load_after"] = load()
                if floor_copy is not None:
                    r["floor"] = run_floor(floor_copy, kinds)
                    shutil.rmtree(floor_copy, ignore_errors=True)
                sizes.append(r)
                if self.on_size is not None:   # what is measured so far survives a run cut short
                    self.on_size(self.result(sizes, [x for x in sampler.samples if x.pss]))
        finally:
            samples = sampler.stop()
            srv.stop()
        return self.result(sizes, samples)

    def result(self, sizes: list[dict], samples) -> dict:
        for si, r in enumerate(sizes):
            phase = [s.total for s in samples if s.progress in (2 * si + 1, 2 * si + 2)]
            inc = [s.total for s in samples if s.progress == 2 * si + 2]
            r["peak_mib"] = round(max(phase, default=0) / MIB)
            r["peak_increments_mib"] = round(max(inc, default=0) / MIB)
        return {"code": self.code, "engine": self.engine, "server_root": str(self.server_root),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "peak_mib": round(max((s.total for s in samples), default=0) / MIB), "sizes": sizes}


def active_files(table_path: Path) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(str(table_path)).file_uris())


def summary(per: list[dict]) -> dict:
    secs = [p["seconds"] for p in per]
    med = lambda k: float(np.median([p[k] for p in per]))  # noqa: E731
    return {"p50_s": round(percentile(secs, 0.5), 3), "p95_s": round(percentile(secs, 0.95), 3),
            "max_s": round(max(secs), 3), "files_removed": med("files_removed"), "files_added": med("files_added"),
            "rows_copied": med("rows_copied"), "bytes_added": med("bytes_added"), "bytes_written": med("bytes_written"),
            "dvs_added": med("dvs_added"), "scan_ms": med("scan_ms") if all("scan_ms" in p for p in per) else None,
            "write_amplification": med("write_amplification"),
            "engines": sorted({e for p in per for e in p["engines"] if e})}


def run_floor(table: Path, kinds: dict) -> dict:
    """The same requests applied by delta-rs alone to a copy of the table, in its own process."""
    proc = BaselineProc()
    out = {}
    try:
        for kind, reqs in kinds.items():
            secs = []
            for req in reqs:
                t = 0.0
                if req.replace:
                    t += proc.call("upsert", path=str(table), table=FLOOR_TABLE, files=file_refs(req.replace))["seconds"]
                if req.update:
                    t += proc.call("update", path=str(table), table=FLOOR_TABLE, files=file_refs(req.update))["seconds"]
                if req.delete:
                    t += proc.call("delete", path=str(table), table=FLOOR_TABLE, files=file_refs(req.delete))["seconds"]
                secs.append(t)
            out[kind] = {"p50_s": round(percentile(secs, 0.5), 3), "p95_s": round(percentile(secs, 0.95), 3)}
            print(f"  floor {kind}: p50 {out[kind]['p50_s']} s", flush=True)
    except BaselineFailed as exc:
        out["error"] = str(exc).strip().splitlines()[-1][:300]
        print(f"  floor failed: {out['error']}", flush=True)
    finally:
        proc.stop()
    return out


# ---- the report ---------------------------------------------------------------------------------------

def table_lines(results: list[dict]) -> list[str]:
    out = ["| rows | engine | code | kind | p50 s | p95 s | files removed | files added | rows copied | "
           "MiB added (log) | KiB written | DVs | write ampl. | delta-rs p50 s | engine that wrote | peak MiB | load |",
           "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    rows = []
    for r in results:
        for s in r["sizes"]:
            for kind, k in s["kinds"].items():
                rows.append((s["size"], r["engine"], KINDS.index(kind), r["code"], kind, k, s))
    for size, engine, _, code, kind, k, s in sorted(rows, key=lambda x: (x[0], x[1], x[2], x[3])):
        floor = s.get("floor", {}).get(kind, {}).get("p50_s", "")
        wrote = ", ".join(e.split(" ")[0] for e in k["engines"])
        out.append(f"| {size_label(size)} | {engine} | {code} | {kind} | {k['p50_s']} | {k['p95_s']} | "
                   f"{k['files_removed']:g} | {k['files_added']:g} | {k['rows_copied']:,.0f} | "
                   f"{k['bytes_added'] / MIB:.1f} | {k['bytes_written'] / 1024:,.0f} | {k['dvs_added']:g} | "
                   f"{k['write_amplification']:,.0f}x | {floor} | {wrote} | {s['peak_mib']} | "
                   f"{s['load_before'].split()[0]}-{s['load_after'].split()[0]} |")
    return out


HEADING = "## Increments into big tables (make bench-increments)"


def section(results: list[dict]) -> list[str]:
    runs = "; ".join(f"{r['code']} {r['engine']}: {r['date']}, load {r['sizes'][0]['load_before'].split()[0]}-"
                     f"{r['sizes'][-1]['load_after'].split()[0]}" for r in results if r["sizes"])
    return [HEADING, "",
            "One 20-column table (LONG key `id`) grown through the server by 1M-row WriteBatch requests of new keys; "
            "at each size, one request at a time, 5 of each kind: `uniform` = 100-row upsert, 50 updates spread "
            "uniformly over the table + 50 new keys; `recent` = the same with its updates among the newest 5% of rows; "
            "`partial` = 20 partial updates (unmodified markers) + 5 deletes. Files removed / added, rows copied "
            "(numTargetRowsCopied), MiB added (the log's add.size sum: a file re-added with a deletion vector counts "
            "its whole size), KiB written (new data files + deletion vectors) and DVs come from the request's commits "
            "in the Delta log (medians); write amplification = bytes written / the batch's Arrow bytes. delta-rs p50: "
            "the same batches by `DeltaTable.merge` alone on a copy of the table (bench/common/baseline.py). Peak: the "
            "server's process-tree PSS during that size. Load: the machine's 1-minute load average before and after "
            "that size's requests. `new` and `old` ran the same batches on the same machine "
            "in one session (the old server from a worktree of that commit on PYTHONPATH). The machine is shared "
            f"(2 cores; 1-minute load at the start / end of each run: {runs}).", "",
            *table_lines(results), ""]


def save(results: list[dict]) -> None:
    from ..common.report_sections import splice

    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    mine = {(r["code_label"], r["engine"]) for r in results}
    kept = [o for o in old if (o.get("code_label"), o["engine"]) not in mine]
    RESULTS.write_text(json.dumps(kept + results, indent=1) + "\n")
    splice(DOCS / "benchmarks.md", section(kept + results))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="auto,spark")
    ap.add_argument("--sizes", default="1M,10M")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline-commit", default=None, help="also run this commit's server (before/after, one run)")
    ap.add_argument("--only-baseline", action="store_true", help="run the --baseline-commit's server alone")
    ap.add_argument("--no-floor", action="store_true", help="skip delta-rs's own MERGE on a copy of the table")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "bench-increments-cache")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--tag", default="", help="appended to the saved runs' labels (a second run of the same code)")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--print", action="store_true", help="print the table of the saved results and stop")
    args = ap.parse_args(argv)
    if args.print:
        print("\n".join(table_lines(json.loads(RESULTS.read_text()))))
        return 0
    sizes = sorted(parse_size(s) for s in args.sizes.split(",") if s.strip())
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    print(f"planning {', '.join(size_label(s) for s in sizes)} (cache {args.cache}), load {load()}", flush=True)
    plan = Workload(args.cache, sizes, args.repeat).plan()
    codes = [] if args.only_baseline else [(f"new {server_commit(ROOT)}{args.tag}", "new", ROOT)]
    if args.baseline_commit:
        codes.append((f"old {args.baseline_commit}", "old", checkout(args.baseline_commit)))
    work = Path(tempfile.mkdtemp(prefix="increments-", dir=args.work))
    results = []
    for engine in engines:
        for code, label, root in codes:
            run = Run(engine, code, root, work / f"{label}-{engine}", floor=not args.no_floor)
            tag = {"code_label": label + args.tag, "sizes_arg": args.sizes, "repeat": args.repeat}
            if not args.no_save:
                run.on_size = lambda partial: save([{**partial, **tag}])
            r = {**run.go(plan), **tag}
            results.append(r)
            print("\n".join(table_lines([r])), flush=True)
            if not args.no_save:
                save([r])
            shutil.rmtree(work / f"{label}-{engine}" / "warehouse", ignore_errors=True)
    print("\n".join(table_lines(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
