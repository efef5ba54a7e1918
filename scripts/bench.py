"""Benchmark: Fivetran-like workloads through the real gRPC server, on each engine, vs a bare delta-rs baseline.

    .venv/bin/python scripts/bench.py                 # everything, both engines (make bench); writes docs/benchmarks.md
    .venv/bin/python scripts/bench.py --scale 0.01    # every row count x0.01: a quick check
    .venv/bin/python scripts/bench.py --only upsert   # one workload (and what it needs first)
    .venv/bin/python scripts/bench.py --skip-growth   # without the 1M/3M/10M growth runs
    .venv/bin/python scripts/bench.py --engines spark # one engine (default: sail,spark side by side)

Workload files are generated once per (seed, scale) under bench-data/ (encrypted
zstd CSV in Fivetran's conventions, see scripts/bench_data.py) and reused.  Each
engine gets its own server subprocess (`python -m delta_destination.fivetran.main
--engine E`) on a free port with its own temporary warehouse; the RSS and CPU of
its process tree (for Spark: the server plus the Spark Connect JVM it starts) are
sampled every 0.1 s and each RPC is timed.  Every step runs on each engine in
turn, then ONCE on the baseline (scripts/bench_baseline.py), which applies the
identical files with server.batch_reader + delta-rs in a separate worker
process, sampled the same way.  A full run (scale 1, all workloads, both
engines) writes docs/benchmarks.md, docs/bench-results.json and
docs/bench-growth.png; partial runs write to bench-data/report/ instead.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Callable, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "scripts")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import grpc  # noqa: E402
import psutil  # noqa: E402

import bench_data as bd  # noqa: E402
from delta_destination.fivetran._proto import destination_sdk_pb2 as pb, destination_sdk_pb2_grpc  # noqa: E402
from delta_destination.core.model import TableSchema  # noqa: E402
from delta_destination.fivetran.convert import table_to_proto  # noqa: E402

DATA_ROOT = ROOT / "bench-data"
DOCS = ROOT / "docs"
SCHEMA = "bench"
NEW_KEY_BASE = 10 ** 12
RPC_TIMEOUT = 4 * 3600
TARGET_RATIO = 1.5
TARGET_WIDE_RPS = 200_000
TARGET_NARROW_RPS = 1_000_000
TARGET_RSS = 2 * 1024 ** 3
TARGET_TREE_RSS = 4 * 1024 ** 3  # issue 8: the Spark growth series within 4 GB (process tree, JVM included)
TARGET_GROWTH_SLOWDOWN = 2.0     # issue 8: the Spark upsert at 10M within 2x the same upsert at 1M
DISTRIBUTIONS = ["uniform", "recent"]  # growth upserts at each size, in this order
RECENT_NEW_KEY_OFFSET = 5 * 10 ** 8   # the "recent" upserts' new keys, apart from the uniform ones'
ENGINE_CHOICES = ("sail", "spark")
RSS_GROWTH_TOLERANCE = 1.2  # "not growing": peak at 10M <= 1.2 x peak at 1M (sampling noise, allocator slack)

WORKLOADS = ["initial_load", "upsert", "partial_update", "hard_delete", "soft_truncate", "narrow_load", "history",
             "growth"]
CHAINS = {  # a workload needs the ones before it in its chain
    "initial_load": ["initial_load"],
    "upsert": ["initial_load", "upsert"],
    "partial_update": ["initial_load", "upsert", "partial_update"],
    "hard_delete": ["initial_load", "upsert", "partial_update", "hard_delete"],
    "soft_truncate": ["initial_load", "upsert", "partial_update", "hard_delete", "soft_truncate"],
    "narrow_load": ["narrow_load"],
    "history": ["history"],
    "growth": ["growth"],
}


# ----------------------------------------------------------------------------
# Process sampling
# ----------------------------------------------------------------------------

def _exe(p: psutil.Process) -> Optional[str]:
    try:
        return p.exe()
    except psutil.Error:
        return None


def _tree_parts(proc: psutil.Process) -> list[tuple[str, int]]:
    """(name, RSS) of a process and all its descendants (for Spark: the server, the JVM and its launcher).

    A child that runs its parent's executable is a fork that has not exec'd (yet): the JVM starts
    helper commands (Hadoop's shell calls) by forking from a task thread, and for that moment the
    child reports the JVM's whole resident set, which is the parent's pages shared copy-on-write.
    Counting it would double the JVM in the sum, so such children are left out."""
    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return []
    exes = {p.pid: _exe(p) for p in procs}
    out = []
    for p in procs:
        try:
            if p is not proc:
                parent_exe = exes.get(p.ppid())
                if parent_exe is not None and exes.get(p.pid) == parent_exe:
                    continue
            out.append((p.name(), p.memory_info().rss))
        except psutil.Error:
            pass
    return out


def _tree_rss(proc: psutil.Process) -> int:
    return sum(rss for _, rss in _tree_parts(proc))


def _parts_text(parts: list[tuple[str, int]]) -> str:
    return " + ".join(f"{n} {rss / 1024 ** 3:.2f} GB" for n, rss in parts if rss >= 16 * 1024 ** 2)


def _tree_names(proc: psutil.Process) -> list[str]:
    """The processes counted in _tree_rss (the server, and for Spark its JVM), for the report."""
    out = []
    try:
        for p in [proc] + proc.children(recursive=True):
            try:
                out.append(f"{p.name()} ({p.memory_info().rss / 1024 ** 3:.2f} GB)")
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return out


def _tree_cpu(proc: psutil.Process) -> float:
    total = 0.0
    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0.0
    for p in procs:
        try:
            c = p.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total


class Sampler(threading.Thread):
    """Peak RSS (process tree) of watched processes, sampled every 0.1 s.

    A process tree over its cap is killed (SIGKILL, by pid: only processes this
    script started and their descendants) so a runaway engine cannot take the shared machine down;
    the step that was running records the failure.
    """

    def __init__(self, interval: float = 0.1, cap: Optional[int] = None):
        super().__init__(daemon=True, name="rss-sampler")
        self.interval = interval
        self.cap = cap
        self.procs: dict[str, psutil.Process] = {}
        self.peaks: dict[str, int] = {}
        self.peak_parts: dict[str, str] = {}  # what the tree held at its peak, e.g. "python 0.2 GB + java 2.6 GB"
        self.capped: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def watch(self, name: str, pid: int) -> None:
        with self._lock:
            self.procs[name] = psutil.Process(pid)
            self.peaks[name] = 0
            self.capped.pop(name, None)

    def reset(self) -> None:
        with self._lock:
            for name, p in self.procs.items():
                parts = _tree_parts(p)
                self.peaks[name] = sum(r for _, r in parts)
                self.peak_parts[name] = _parts_text(parts)

    def _sample(self, name: str, p: psutil.Process) -> None:
        parts = _tree_parts(p)
        rss = sum(r for _, r in parts)
        if rss > self.peaks.get(name, 0):
            self.peaks[name] = rss
            self.peak_parts[name] = _parts_text(parts)
        if self.cap and rss > self.cap and name not in self.capped:
            self.capped[name] = rss
            # the whole tree, by pid (the Spark JVM would also die with its parent, by PR_SET_PDEATHSIG)
            try:
                tree = [p] + p.children(recursive=True)
            except psutil.Error:
                tree = [p]
            for q in tree:
                try:
                    q.kill()
                except psutil.Error:
                    pass

    def peak(self, name: str) -> int:
        with self._lock:
            p = self.procs.get(name)
            if p is not None:
                self._sample(name, p)
            return self.peaks.get(name, 0)

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                for name, p in self.procs.items():
                    self._sample(name, p)

    def stop(self) -> None:
        self._stop.set()


# ----------------------------------------------------------------------------
# The server under test
# ----------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, warehouse: Path, log_path: Path, command: Optional[list[str]] = None, env: Optional[dict] = None,
                 engine: str = "sail"):
        self.port = _free_port()
        self.engine = engine
        self.warehouse = warehouse
        self.log_path = log_path
        self._log = open(log_path, "ab")
        cmd = command or [sys.executable, "-m", "delta_destination.fivetran.main"]
        self.proc = subprocess.Popen([*cmd, "--port", str(self.port), "--warehouse", str(warehouse), "--engine", engine],
                                     cwd=ROOT,
                                     stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = destination_sdk_pb2_grpc.DestinationConnectorStub(self.channel)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 300.0) -> None:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        health = health_pb2_grpc.HealthStub(self.channel)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                if health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status == \
                        health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not become healthy: " + self.log_tail())

    def log_tail(self, n: int = 3000) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-n:]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.channel.close()
        self._log.close()


def file_params() -> pb.FileParams:
    return pb.FileParams(compression=int(bd.PARAMS.compression), encryption=int(bd.PARAMS.encryption),
                         null_string=bd.NULL_STRING, unmodified_string=bd.UNMOD_STRING)


class RpcFailed(Exception):
    def __init__(self, message: str, code: Optional[str] = None):
        super().__init__(message)
        self.code = code  # the gRPC status name when the call itself failed (RESOURCE_EXHAUSTED = refused by the guard)


def _check(resp, what: str) -> None:
    if resp.HasField("task"):
        raise RpcFailed(f"{what}: task: {resp.task.message}")
    if resp.HasField("warning"):
        print(f"    warning from {what}: {resp.warning.message}", flush=True)
    if not getattr(resp, "success", False):
        raise RpcFailed(f"{what}: response without success: {resp}")


def _call(fn, req, what: str, label: str):
    try:
        resp = fn(req, timeout=RPC_TIMEOUT, metadata=(("bench-label", label),))
    except grpc.RpcError as e:
        raise RpcFailed(f"{what}: gRPC {e.code().name}: {e.details()}", code=e.code().name) from None
    _check(resp, what)
    return resp


def write_batch(stub, table: TableSchema, *, replace=(), update=(), delete=(), label="WriteBatch"):
    req = pb.WriteBatchRequest(
        schema_name=SCHEMA, table=table_to_proto(table),
        keys={f.path: f.key_bytes() for f in (*replace, *update, *delete)},
        replace_files=[f.path for f in replace], update_files=[f.path for f in update],
        delete_files=[f.path for f in delete], file_params=file_params())
    _call(stub.WriteBatch, req, f"WriteBatch {table.name}", label)


def write_history_batch(stub, table: TableSchema, *, earliest=(), replace=(), label="WriteHistoryBatch"):
    req = pb.WriteHistoryBatchRequest(
        schema_name=SCHEMA, table=table_to_proto(table),
        keys={f.path: f.key_bytes() for f in (*earliest, *replace)},
        earliest_start_files=[f.path for f in earliest], replace_files=[f.path for f in replace],
        file_params=file_params())
    _call(stub.WriteHistoryBatch, req, f"WriteHistoryBatch {table.name}", label)


def create_table(stub, table: TableSchema) -> None:
    _call(stub.CreateTable, pb.CreateTableRequest(schema_name=SCHEMA, table=table_to_proto(table)),
          f"CreateTable {table.name}", "CreateTable")


def soft_truncate(stub, table: TableSchema, before_ms: int, label="Truncate") -> None:
    from google.protobuf.timestamp_pb2 import Timestamp

    ts = Timestamp()
    ts.FromMilliseconds(before_ms)
    req = pb.TruncateRequest(schema_name=SCHEMA, table_name=table.name, synced_column="_fivetran_synced",
                             utc_delete_before=ts, soft=pb.SoftTruncate(deleted_column="_fivetran_deleted"))
    _call(stub.Truncate, req, f"Truncate {table.name}", label)


# ----------------------------------------------------------------------------
# The baseline worker
# ----------------------------------------------------------------------------

class BaselineProc:
    def __init__(self):
        import bench_baseline

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=bench_baseline.worker, args=(child,), name="bench-baseline", daemon=True)
        self.proc.start()
        child.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def call(self, cmd: str, **kwargs) -> dict:
        self.conn.send((cmd, kwargs))
        status, res = self.conn.recv()
        if status != "ok":
            raise RpcFailed(f"baseline {cmd} failed:\n{res}")
        return res

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(10)


def _files(specs) -> list[dict]:
    return [{"path": s.path, "key": s.key} for s in specs]


# ----------------------------------------------------------------------------
# The benchmark
# ----------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.engines: list[str] = args.engines
        self.gen = bd.Generator(DATA_ROOT, args.seed, args.scale)
        self.results: list[dict] = []   # reported workloads, one row per engine
        self.setup: list[dict] = []     # setup steps (growth appends, history load), one row per engine
        self.failures: list[str] = []
        self.checks: list[dict] = []
        self.events: list[str] = []
        self.restarts = 0
        self.servers: dict[str, Server] = {}
        self.engine = self.engines[0]   # the engine the current server call goes to
        self.startup: dict[str, list[float]] = {e: [] for e in self.engines}
        self.t0 = time.monotonic()
        self.n = self.gen.n
        self.N = self.n(1_000_000)
        self.U = self.n(100_000)
        self.growth_sizes = [self.N, self.n(3_000_000), self.n(10_000_000)]

    def log(self, msg: str) -> None:
        """A progress line: UTC time and minutes since the start of the run."""
        now = dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S")
        print(f"[{now} +{(time.monotonic() - self.t0) / 60:5.1f}m] {msg}", flush=True)

    # ---- files -----------------------------------------------------------------------------
    def files(self) -> dict:
        """Every workload's batch files (generated on first use, then cached)."""
        g, N, U = self.gen, self.N, self.U
        shuffle = lambda name, a: g._rng(name, 6).permutation(a)  # noqa: E731
        f = {}
        want = set(self.selected)
        wide_chain = want & {"initial_load", "upsert", "partial_update", "hard_delete", "soft_truncate", "growth"}
        if wide_chain:
            f["init"] = g.wide_rows("init", np.arange(N, dtype=np.int64), 0)
        if want & {"upsert", "partial_update", "hard_delete", "soft_truncate", "growth"}:
            ids = np.concatenate([g.sample_existing("upsert", U // 2, N),
                                  NEW_KEY_BASE + np.arange(U - U // 2, dtype=np.int64)])
            f["upsert"] = g.wide_rows("upsert", shuffle("upsert", ids), 1)
        if want & {"partial_update", "hard_delete", "soft_truncate"}:
            f["update"] = g.wide_rows("update", shuffle("update", g.sample_existing("update", U, N)), 2,
                                      kind="update", unmod_frac=0.7)
        if want & {"hard_delete", "soft_truncate"}:
            f["delete"] = g.keys_only("delete", shuffle("delete", g.sample_existing("delete", U, N)), 3, "delete",
                                      {"_fivetran_synced": bd._sync_ms(3)})
        if "narrow_load" in want:
            f["narrow"] = g.narrow_rows("narrow", np.arange(self.n(2_000_000), dtype=np.int64), 0)
        if "history" in want:
            f["hist_init"] = g.wide_rows("hist_init", np.arange(N, dtype=np.int64), 0, table=bd.HISTORY,
                                         history={"start_ms": bd._sync_ms(0)})
            keys = shuffle("hist", g.sample_existing("hist", U, N))
            f["hist_earliest"] = g.keys_only("hist_earliest", keys, 1, "earliest",
                                             {"_fivetran_start": bd._sync_ms(1)})
            f["hist_versions"] = g.wide_rows("hist_versions", keys, 1, table=bd.HISTORY,
                                             history={"start_ms": bd._sync_ms(1)})
        if "growth" in want and not self.args.skip_growth:
            sizes = self.growth_sizes
            prev = sizes[0]
            for i, size in enumerate(sizes):
                if i:
                    f[f"g_append_{i}"] = g.wide_rows(f"g_append_{i}", np.arange(prev, size, dtype=np.int64), 4 + i)
                    ids = np.concatenate([g.sample_existing(f"g_upsert_{i}", U // 2, size),
                                          NEW_KEY_BASE + i * 10 ** 9 + np.arange(U - U // 2, dtype=np.int64)])
                    f[f"g_upsert_{i}"] = g.wide_rows(f"g_upsert_{i}", shuffle(f"g_upsert_{i}", ids), 5 + i)
                # "recent": 90% of the existing keys among the newest 10% of the appended keys 0..size-1
                # (new keys in their own range, after the uniform upsert's)
                ids = np.concatenate([g.sample_recent(f"g_recent_{i}", U // 2, size),
                                      NEW_KEY_BASE + i * 10 ** 9 + RECENT_NEW_KEY_OFFSET
                                      + np.arange(U - U // 2, dtype=np.int64)])
                f[f"g_recent_{i}"] = g.wide_rows(f"g_recent_{i}", shuffle(f"g_recent_{i}", ids), 5 + i)
                prev = size
        return f

    # ---- one measured step -----------------------------------------------------------------
    def step(self, name: str, *, rows: int, specs=(), server_fn: Callable[[], None],
             baseline_fn: Optional[Callable[[], dict]], table_size: Optional[int] = None, setup=False,
             table: Optional[str] = None, engines: Optional[list[str]] = None, extra: Optional[dict] = None
             ) -> dict[str, dict]:
        """One workload step: server_fn on each engine's server in turn (self.engine says which), then
        baseline_fn ONCE; the baseline's figures are copied into each engine's row. Returns engine -> row."""
        engines = engines or self.engines
        in_bytes = sum(s.bytes for s in specs)
        base = {"workload": name, "rows": rows, "files": len(specs), "input_bytes": in_bytes, "table_size": table_size,
                **(extra or {})}
        self.log(f"{name}: {rows:,} rows, {len(specs)} files, {in_bytes / 1e6:.1f} MB")
        out: dict[str, dict] = {}
        for e in engines:
            self.engine = e
            r = {**base, "engine": e, "loadavg_before": round(os.getloadavg()[0], 2)}
            self._server_part(r, name, server_fn)
            out[e] = r
        bl: dict = {}
        if baseline_fn is not None:
            bl = self._baseline_part(name, baseline_fn)
        for e, r in out.items():
            self.engine = e
            r.update(bl)
            if r.get("server_s") and r.get("baseline_s"):
                r["ratio"] = r["server_s"] / r["baseline_s"]
            if r.get("server_s"):
                r["rows_per_s"] = rows / r["server_s"]
                r["mb_per_s"] = in_bytes / 1e6 / r["server_s"] if in_bytes else None
            if table and r.get("server_s") is not None:
                r.update(self.verify(table))
            print(f"    {e}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in r.items()
                                          if k in ("server_s", "server_outcome", "baseline_s", "ratio", "rows_per_s",
                                                   "server_peak_rss", "baseline_peak_rss", "server_cpu_s",
                                                   "rows_server", "rows_baseline", "equal")), flush=True)
            (self.setup if setup else self.results).append(r)
        return out

    def _server_part(self, r: dict, name: str, server_fn: Callable[[], None]) -> None:
        e = self.engine
        key = f"server:{e}"
        srv = psutil.Process(self.server.proc.pid)
        self.sampler.reset()
        r["server_rss_before"] = self.sampler.peak(key)
        cpu0 = _tree_cpu(srv)
        t = time.perf_counter()
        try:
            server_fn()
            r["server_s"] = time.perf_counter() - t
            r["server_outcome"] = "ok"
        except Exception as exc:  # noqa: BLE001
            took = time.perf_counter() - t
            r["server_s"] = None
            r["server_failed_after_s"] = took
            r["server_error"] = str(exc)[:2000]
            time.sleep(0.3)
            capped = self.sampler.capped.get(key)
            if capped:
                r["server_outcome"] = "killed"
                r["server_error"] = (f"killed by the benchmark after {took:.0f} s: server process tree RSS reached "
                                     f"{capped / 1024 ** 3:.1f} GB, over the {self.args.rss_cap_gb:g} GB safety cap "
                                     f"| {r['server_error'][:300]}")
            elif isinstance(exc, RpcFailed) and exc.code == "RESOURCE_EXHAUSTED":
                r["server_outcome"] = "refused"
                r["server_error"] = "refused by the memory guard (gRPC RESOURCE_EXHAUSTED) | " + r["server_error"]
            elif not self.server.alive():
                r["server_outcome"] = "died"
                r["server_error"] += " | server process died: " + self.server.log_tail(1500)
            else:
                r["server_outcome"] = "failed"
            self.failures.append(f"{name} [{e}]: {r['server_error']}")
            self.log(f"    {e}: SERVER {r['server_outcome'].upper()} after {took:.1f}s: {r['server_error'][:500]}")
        r["server_cpu_s"] = _tree_cpu(srv) if self.server.alive() else None
        if r["server_cpu_s"] is not None:
            r["server_cpu_s"] -= cpu0
        r["server_peak_rss"] = self.sampler.peak(key)
        r["server_peak_parts"] = self.sampler.peak_parts.get(key)
        if not self.server.alive():
            self.restart_server(f"after the failure of {name}")

    def _baseline_part(self, name: str, baseline_fn: Callable[[], dict]) -> dict:
        r: dict = {}
        self.sampler.reset()
        try:
            res = baseline_fn()
            r["baseline_s"] = res["seconds"]
            r["baseline_read_s"] = res.get("read_s")
            r["baseline_write_s"] = res.get("write_s")
        except Exception as exc:  # noqa: BLE001
            r["baseline_s"] = None
            r["baseline_error"] = str(exc)[-2000:]
            time.sleep(0.3)
            if self.sampler.capped.get("baseline"):
                r["baseline_error"] = (f"killed by the benchmark: baseline RSS over the "
                                       f"{self.args.rss_cap_gb:g} GB safety cap")
            self.failures.append(f"{name} (baseline): {r['baseline_error'][-600:]}")
            self.log(f"    BASELINE FAILED: {r['baseline_error'][-800:]}")
        r["baseline_peak_rss"] = self.sampler.peak("baseline")
        if not self.bl.proc.is_alive():
            self.restart_baseline(f"after the baseline failure of {name}")
        return r

    @property
    def server(self) -> Server:
        return self.servers[self.engine]

    @property
    def stub(self):
        return self.server.stub  # looked up per call: the server may have been restarted

    def start_server(self, engine: str, why: str) -> None:
        """A (new) server process for `engine` on that engine's warehouse (its tables stay)."""
        old = self.servers.get(engine)
        if old is not None:
            old.stop()
        t = time.monotonic()
        self.restarts += 1
        srv = Server(self.warehouses[engine], self.tmp / f"server-{engine}-{self.restarts}.log", engine=engine)
        took = time.monotonic() - t
        self.servers[engine] = srv
        self.startup[engine].append(took)
        self.sampler.watch(f"server:{engine}", srv.proc.pid)
        self.events.append(f"{engine}: server started {why} ({took:.1f} s to SERVING)")
        self.log(f"  {engine}: server started {why} ({took:.1f} s to SERVING)")

    def restart_server(self, why: str) -> None:
        self.start_server(self.engine, why)

    def restart_baseline(self, why: str) -> None:
        self.bl.stop()
        self.bl = BaselineProc()
        self.sampler.watch("baseline", self.bl.pid)
        self.events.append(f"baseline worker restarted {why}")

    def verify(self, table: str) -> dict:
        """Row counts of the current engine's and the baseline's tables (and full equality on small runs)."""
        out = {}
        try:
            out["rows_server"] = self.bl.call("count", path=self.srv_path(table))["rows"]
            out["rows_baseline"] = self.bl.call("count", path=self.bl_path(table))["rows"]
            if self.args.scale <= 0.05:
                c = self.bl.call("compare", a=self.srv_path(table), b=self.bl_path(table), table=table)
                out["equal"] = c["equal"]
                if not c["equal"]:
                    out["compare_note"] = c["why"]
        except Exception as e:  # noqa: BLE001
            out["verify_error"] = str(e)[-500:]
        self.checks.append({"table": table, "engine": self.engine, **out})
        return out

    def srv_path(self, table: str) -> str:
        return str(self.warehouses[self.engine] / SCHEMA / table)

    def bl_path(self, table: str) -> str:
        return str(self.bl_root / table)

    def _create(self, table: TableSchema) -> None:
        for e in self.engines:
            self.engine = e
            create_table(self.server.stub, table)
        self.bl.call("create", path=self.bl_path(table.name), table=table.name)

    # ---- workloads -------------------------------------------------------------------------
    def run_wide_chain(self, f: dict) -> None:
        W = bd.WIDE
        chain = [w for w in WORKLOADS[:5] if w in self.selected]
        if not chain:
            return
        self._create(W)
        out = self.step("initial_load", rows=self.N, specs=f["init"], table="wide", table_size=0,
                        server_fn=lambda: write_batch(self.stub, W, replace=f["init"], label="initial_load"),
                        baseline_fn=lambda: self.bl.call("load", path=self.bl_path("wide"), table="wide",
                                                         files=_files(f["init"])))
        engines = [e for e, r in out.items() if r.get("server_s") is not None]
        if not engines:
            return
        if "upsert" in chain:
            self.step("upsert", rows=self.U, specs=f["upsert"], table="wide", table_size=self.N, engines=engines,
                      server_fn=lambda: write_batch(self.stub, W, replace=f["upsert"], label="upsert"),
                      baseline_fn=lambda: self.bl.call("upsert", path=self.bl_path("wide"), table="wide",
                                                       files=_files(f["upsert"])))
        if "partial_update" in chain:
            self.step("partial_update", rows=self.U, specs=f["update"], table="wide", table_size=self.N + self.U // 2,
                      engines=engines,
                      server_fn=lambda: write_batch(self.stub, W, update=f["update"], label="partial_update"),
                      baseline_fn=lambda: self.bl.call("update", path=self.bl_path("wide"), table="wide",
                                                       files=_files(f["update"])))
        if "hard_delete" in chain:
            self.step("hard_delete", rows=self.U, specs=f["delete"], table="wide", table_size=self.N + self.U // 2,
                      engines=engines,
                      server_fn=lambda: write_batch(self.stub, W, delete=f["delete"], label="hard_delete"),
                      baseline_fn=lambda: self.bl.call("delete", path=self.bl_path("wide"), table="wide",
                                                       files=_files(f["delete"])))
        if "soft_truncate" in chain:
            size = self.bl.call("count", path=self.bl_path("wide"))["rows"]
            before = dt.datetime.fromtimestamp(bd.TRUNCATE_BEFORE_MS / 1000, dt.timezone.utc)
            self.step("soft_truncate", rows=size, table="wide", table_size=size, engines=engines,
                      server_fn=lambda: soft_truncate(self.stub, W, bd.TRUNCATE_BEFORE_MS, label="soft_truncate"),
                      baseline_fn=lambda: self.bl.call("soft_truncate", path=self.bl_path("wide"),
                                                       before_iso=before.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                                                       synced="_fivetran_synced", deleted="_fivetran_deleted"))

    def run_narrow(self, f: dict) -> None:
        T = bd.NARROW
        self._create(T)
        n = sum(s.rows for s in f["narrow"])
        self.step("narrow_load", rows=n, specs=f["narrow"], table="events", table_size=0,
                  server_fn=lambda: write_batch(self.stub, T, replace=f["narrow"], label="narrow_load"),
                  baseline_fn=lambda: self.bl.call("load", path=self.bl_path("events"), table="events",
                                                   files=_files(f["narrow"])))

    def run_history(self, f: dict) -> None:
        H = bd.HISTORY
        self._create(H)
        out = self.step("history: initial load (setup)", rows=self.N, specs=f["hist_init"], table="hist",
                        table_size=0, setup=True,
                        server_fn=lambda: write_history_batch(self.stub, H, replace=f["hist_init"],
                                                              label="history_load"),
                        baseline_fn=lambda: self.bl.call("load", path=self.bl_path("hist"), table="hist",
                                                         files=_files(f["hist_init"])))
        engines = [e for e, r in out.items() if r.get("server_s") is not None]
        if not engines:
            return
        specs = f["hist_earliest"] + f["hist_versions"]
        self.step("history", rows=self.U, specs=specs, table="hist", table_size=self.N, engines=engines,
                  server_fn=lambda: write_history_batch(self.stub, H, earliest=f["hist_earliest"],
                                                        replace=f["hist_versions"], label="history"),
                  baseline_fn=lambda: self.bl.call("history", path=self.bl_path("hist"), table="hist",
                                                   earliest=_files(f["hist_earliest"]),
                                                   replace=_files(f["hist_versions"])))

    def run_growth(self, f: dict) -> None:
        """Grow one wide table per engine 1M -> 3M -> 10M with 1M-row WriteBatch appends (the initial-load
        path) and at each size measure two 100k upserts, first with existing keys uniform over the table,
        then with 90% of them among the newest 10% of keys; each upsert on freshly started servers so the
        peak RSS belongs to that upsert at that table size (what a long-running server accumulates shows in
        the setup steps). The baseline applies every file once. If an engine's append fails (e.g. killed at
        the RSS cap), the rest of that engine's table is appended with delta-rs straight into its warehouse,
        so its upserts can still be measured."""
        G = bd.TABLES["growth"]
        self._create(G)
        sizes = self.growth_sizes
        per_req = self.n(bd.ROWS_PER_REQUEST)
        small = self.args.scale <= 0.05
        direct = {e: False for e in self.engines}

        def append_direct(req) -> None:
            self.bl.call("load", path=self.srv_path("growth"), table="growth", files=_files(req))

        def load(group: str, size_before: int, label: str) -> None:
            for j, req in enumerate(bd.chunked(f[group], per_req)):
                rows = sum(s.rows for s in req)
                name = f"growth: append {rows:,} rows at {size_before:,} ({label} {j + 1})"
                was_direct = dict(direct)

                def srv(req=req, j=j) -> None:
                    if direct[self.engine]:
                        append_direct(req)
                    else:
                        write_batch(self.stub, G, replace=req, label=f"growth_{group}_{j}")

                out = self.step(name, rows=rows, specs=req, setup=True, table_size=size_before,
                                table="growth" if small else None, server_fn=srv,
                                baseline_fn=lambda req=req: self.bl.call("load", path=self.bl_path("growth"),
                                                                         table="growth", files=_files(req)))
                for e, r in out.items():
                    if was_direct[e]:
                        r["workload"] += " [delta-rs direct]"
                        r["direct"] = True
                    elif r.get("server_s") is None:
                        direct[e] = True
                        self.events.append(f"{e}: growth WriteBatch append failed at {size_before:,} rows; the rest "
                                           "of its growth table is appended with delta-rs directly into its warehouse")
                        dr = self.step(name + " [delta-rs direct, after the server failed]", rows=rows, specs=req,
                                       setup=True, table_size=size_before, baseline_fn=None, engines=[e],
                                       server_fn=lambda req=req: append_direct(req))
                        dr[e]["direct"] = True
                size_before += rows

        load("init", 0, "load")
        extra = 0  # new keys added by earlier upserts
        for i, size in enumerate(sizes):
            if i:
                load(f"g_append_{i}", sizes[i - 1] + extra, "append")
            for dist in DISTRIBUTIONS:
                group = f"g_recent_{i}" if dist == "recent" else ("upsert" if i == 0 else f"g_upsert_{i}")
                for e in self.engines:
                    self.engine = e
                    self.restart_server(f"(fresh server for the growth upsert at {size:,} rows, {dist})")
                    # warm-up outside the measurement: the first request on a new server reads the table's metadata
                    self.stub.DescribeTable(pb.DescribeTableRequest(schema_name=SCHEMA, table_name=G.name),
                                            timeout=600)
                self.step(f"growth: upsert at {size / 1e6:g}M ({dist})", rows=self.U, specs=f[group],
                          table="growth", table_size=size + extra,
                          extra={"growth_size": size, "distribution": dist},
                          server_fn=lambda group=group, i=i, dist=dist: write_batch(
                              self.stub, G, replace=f[group], label=f"growth_upsert_{i}_{dist}"),
                          baseline_fn=lambda group=group: self.bl.call("upsert", path=self.bl_path("growth"),
                                                                       table="growth", files=_files(f[group])))
                extra += self.U - self.U // 2

    # ---- profiles --------------------------------------------------------------------------
    def run_profiles(self, f: dict) -> dict:
        """Initial load and incremental upsert again, on an embedded-Sail server with pyinstrument in its
        handlers (the Spark engine's time is in its JVM, which pyinstrument cannot see)."""
        out_dir = self.tmp / "profiles"
        wh = self.tmp / "warehouse-profile"
        self.log("profiling: sail server under pyinstrument (initial load, upsert)")
        srv = Server(wh, self.tmp / "server-profile.log",
                     command=[sys.executable, str(ROOT / "scripts" / "bench_profile_server.py")],
                     env={"BENCH_PROFILE_DIR": str(out_dir)}, engine="sail")
        prof = {}
        try:
            create_table(srv.stub, bd.WIDE)
            for label, kw in (("initial_load", {"replace": f["init"]}), ("upsert", {"replace": f["upsert"]})):
                t = time.perf_counter()
                try:
                    write_batch(srv.stub, bd.WIDE, label=label, **kw)
                    took = time.perf_counter() - t
                except RpcFailed as e:
                    prof[label] = {"error": str(e)}
                    continue
                prof[label] = {"seconds": took, **summarize_profile(out_dir / f"{label}.pyisession",
                                                                     out_dir / f"{label}.txt")}
                self.log(f"  {label}: {took:.1f}s under the profiler")
        finally:
            srv.stop()
        return prof

    # ---- main ------------------------------------------------------------------------------
    def run(self) -> dict:
        a = self.args
        sel = [a.only] if a.only else WORKLOADS
        chain = []
        for w in sel:
            if w == "growth" and a.skip_growth:
                continue
            for x in CHAINS[w]:
                if x not in chain:
                    chain.append(x)
        self.selected = chain
        started = dt.datetime.now(dt.timezone.utc)
        self.log(f"workloads: {', '.join(chain)} on {', '.join(self.engines)} (scale {a.scale:g}, seed {a.seed})")
        self.log(f"generating / reusing batch files under {self.gen.dir}")
        t = time.monotonic()
        f = self.files()
        gen_s = time.monotonic() - t
        DATA_ROOT.mkdir(exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="run-", dir=DATA_ROOT))
        self.warehouses = {e: self.tmp / f"warehouse-{e}" for e in self.engines}
        self.bl_root = self.tmp / "baseline"
        self.bl_root.mkdir()
        facts = machine_facts()
        self.sampler = Sampler(cap=int(a.rss_cap_gb * 1024 ** 3))
        self.sampler.start()
        self.bl = BaselineProc()
        self.sampler.watch("baseline", self.bl.pid)
        idle_rss, tree = {}, {}
        for e in self.engines:
            self.start_server(e, f"(warehouse {self.warehouses[e]})")
            time.sleep(1.0)  # let the engine settle before the idle figures
            idle_rss[e], tree[e] = _tree_rss(psutil.Process(self.servers[e].proc.pid)), _tree_names(
                psutil.Process(self.servers[e].proc.pid))
            self.log(f"  {e}: idle process tree {_gb(idle_rss[e])}: {', '.join(tree[e])}")
        first_start = {e: self.startup[e][0] for e in self.engines}
        profiles = {}
        server_log = ""
        try:
            self.run_wide_chain(f)
            if "narrow_load" in chain:
                self.run_narrow(f)
            if "history" in chain:
                self.run_history(f)
            if "growth" in chain:
                self.run_growth(f)
        finally:
            for srv in self.servers.values():
                srv.stop()
            server_log = "\n".join(
                (self.tmp / n).read_text(errors="replace") for n in sorted(os.listdir(self.tmp)) if n.startswith("server"))
            self.bl.stop()
            self.sampler.stop()
        if not a.no_profile and "init" in f and "upsert" in f and "sail" in self.engines:
            try:
                profiles = self.run_profiles(f)
            except Exception as e:  # noqa: BLE001
                profiles = {"error": str(e)}
        severe = [ln for ln in server_log.splitlines() if '"SEVERE"' in ln]
        res = {
            "started": started.isoformat(timespec="seconds"),
            "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([".venv/bin/python", "scripts/bench.py", *sys.argv[1:]]),
            "scale": a.scale, "seed": a.seed, "machine": facts, "engines": self.engines,
            "spark_driver_memory": os.environ.get("DELTA_DESTINATION_SPARK_DRIVER_MEMORY", "1536m"),
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "generate_s": round(gen_s, 1), "generation": self.gen.meta,
            "server_startup_s": first_start, "server_restarts_s": self.startup,
            "server_idle_rss": idle_rss, "server_tree": tree,
            "results": self.results, "setup": self.setup, "failures": self.failures, "events": self.events,
            "rss_cap_gb": a.rss_cap_gb, "run_minutes": round((time.monotonic() - self.t0) / 60, 1),
            "server_severe_log": severe[-20:], "profiles": profiles,
            "files": {k: {"files": len(v), "rows": sum(s.rows for s in v), "bytes": sum(s.bytes for s in v)}
                      for k, v in f.items()},
        }
        if not a.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            self.log(f"kept {self.tmp}")
        return res


# ----------------------------------------------------------------------------
# Profiles
# ----------------------------------------------------------------------------

def _is(fn: str, frag: str):
    def match(fr, ancestors) -> bool:
        return fr.function == fn and frag in (fr.file_path or "")
    return match


# engine calls that are not the write statement itself
_NOT_THE_STATEMENT = {"_stage", "_no_stored_key_matches", "_describe", "_metadata", "register", "_current_versions"}


def _statement(fr, ancestors) -> bool:
    """The engine call that applies the batch (MERGE, or the INSERT fast path): run_engine outside
    staging, probes, describe and register."""
    return (fr.function == "run_engine" and "spark_errors.py" in (fr.file_path or "")
            and not any(a.function in _NOT_THE_STATEMENT for a in ancestors))


PHASES = [  # (label, matcher): the outermost matching frames are summed; phases may nest (staging holds uploads)
    ("describe table (schema + metadata)", _is("_describe", "tables.py")),
    ("read batch files (decrypt, zstd, CSV, convert)", _is("read_batch_file", "batch_reader.py")),
    ("stack into merge source", _is("_stack", "batch_merge.py")),
    ("duplicate-key check", _is("_check_duplicates", "batch_merge.py")),
    ("register catalog table", _is("register", "tables.py")),
    ("history: read current versions", _is("_current_versions", "history_merge.py")),
    ("history: plan actions", _is("actions", "history_merge.py")),
    ("ship source: staging Delta table (> 64 MB)", _is("_stage", "batch_merge.py")),
    ("ship source: createDataFrame (client side)", _is("createDataFrame", "session.py")),
    ("ship source: temp view (sends a local relation)", _is("createOrReplaceTempView", "dataframe.py")),
    ("probe: is any batch key stored? (engine)", _is("_no_stored_key_matches", "batch_merge.py")),
    ("MERGE / INSERT statement in the engine (client waits)", _statement),
]


def summarize_profile(session_path: Path, text_path: Path) -> dict:
    """Phase totals from a pyinstrument session, plus the top of its text tree."""
    out = {"tree": "", "phases": [], "total": None}
    if text_path.exists():
        lines = text_path.read_text().splitlines()
        out["tree"] = "\n".join(lines[:70])
    if not session_path.exists():
        return out
    from pyinstrument.session import Session

    session = Session.load(str(session_path))
    root = session.root_frame()
    if root is None:
        return out
    total = root.time
    out["total"] = total
    for label, match in PHASES:
        found: list[float] = []

        def walk(fr, ancestors):
            if match(fr, ancestors):
                found.append(fr.time)
                return
            for ch in fr.children:
                walk(ch, ancestors + [fr])

        walk(root, [])
        acc = sum(found)
        if acc:
            out["phases"].append({"phase": label, "seconds": acc, "share": acc / total if total else None})
    # the biggest self-time leaves (where the CPU or the wait actually is)
    selfs: dict[str, float] = {}

    def leaves(fr, parent=None):
        own = fr.time - sum(c.time for c in fr.children)
        if own > 0:
            # pyinstrument puts a frame's own time in a synthetic "[self]" child: name it by the real frame
            real = parent if (fr.function or "").startswith("[") and parent is not None else fr
            key = f"{real.function} ({Path(real.file_path or '?').name}:{real.line_no})"
            selfs[key] = selfs.get(key, 0.0) + own
        for c in fr.children:
            leaves(c, fr)

    leaves(root)
    out["self_top"] = [{"frame": k, "seconds": v, "share": v / total if total else None}
                       for k, v in sorted(selfs.items(), key=lambda kv: -kv[1])[:12]]
    return out


# ----------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------

def machine_facts() -> dict:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for pkg in ("pyspark", "pyspark-client", "delta-spark", "pysail", "deltalake", "pyarrow", "grpcio", "zstandard", "cryptography", "numpy"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    git = {}
    try:
        git["head"] = subprocess.run(["git", "log", "-1", "--format=%h %s"], cwd=ROOT, capture_output=True,
                                     text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "delta_destination"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10).stdout.split("\n")
        git["server_changes"] = [ln[3:] for ln in dirty if ln.strip()]
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "git": git,
        "nproc": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 1024 ** 3, 1), "cpu": cpu,
        "kernel": platform.release(), "python": platform.python_version(), "versions": versions,
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _gb(b) -> str:
    return "-" if not b else f"{b / 1024 ** 3:.2f} GB"


def _s(x) -> str:
    return "FAILED" if x is None else f"{x:.2f}"


def _rate(x) -> str:
    return "-" if not x else f"{x:,.0f}"


def _engines(res: dict) -> list[str]:
    return res.get("engines") or ["sail"]  # results of runs before issue 8 were embedded Sail only


def _per_engine(res: dict, key: str) -> dict:
    v = res.get(key)
    return v if isinstance(v, dict) else {"sail": v}


def _eng(r: dict) -> str:
    return r.get("engine", "sail")


def _growth_upserts(res: dict, engine: str, dist: Optional[str] = None) -> list[dict]:
    g = [r for r in res["results"] if r["workload"].startswith("growth: upsert") and _eng(r) == engine]
    return [r for r in g if dist is None or r.get("distribution", "uniform") == dist]


def _size(r: dict) -> int:
    return r.get("growth_size") or r["table_size"]


def _outcome_code(r: dict) -> str:
    """ok | killed (at the RSS cap) | refused (by the memory guard) | died | failed."""
    if r.get("server_outcome"):
        return r["server_outcome"]
    if r.get("server_s") is not None:
        return "ok"
    return "killed" if "killed by the benchmark" in (r.get("server_error") or "") else "failed"


def _outcome(r: dict) -> str:
    o = _outcome_code(r)
    return {"ok": "ok", "killed": "killed at the RSS cap", "refused": "refused by the guard",
            "died": "server died", "failed": "failed"}.get(o, o)


def evaluate_engine_targets(res: dict, engine: str) -> list[dict]:
    """Issue 4's targets, for one engine's rows."""
    results = [r for r in res["results"] if _eng(r) == engine]
    setup = [r for r in res["setup"] if _eng(r) == engine and not r.get("direct")]
    by = {r["workload"]: r for r in results}
    t = []
    ratios = [(r["workload"], r.get("ratio")) for r in results]
    bad = [f"{w} ({r:.2f}x)" if r else f"{w} (failed)" for w, r in ratios if r is None or r > TARGET_RATIO]
    t.append({"target": f"every workload within {TARGET_RATIO}x of the bare delta-rs baseline",
              "met": not bad and bool(ratios), "detail": ("not within: " + ", ".join(bad)) if bad else "all within"})
    il = by.get("initial_load")
    if il:
        v = il.get("rows_per_s")
        t.append({"target": f"initial load >= {TARGET_WIDE_RPS:,} rows/s (20 columns)", "met": bool(v and v >= TARGET_WIDE_RPS),
                  "detail": f"{_rate(v)} rows/s"})
    nl = by.get("narrow_load")
    if nl:
        v = nl.get("rows_per_s")
        t.append({"target": f"narrow load >= {TARGET_NARROW_RPS:,} rows/s (4 columns)", "met": bool(v and v >= TARGET_NARROW_RPS),
                  "detail": f"{_rate(v)} rows/s"})
    peaks = [r.get("server_peak_rss") or 0 for r in results + setup]
    if peaks:
        mx = max(peaks)
        t.append({"target": "server peak RSS <= 2 GB (every workload and setup step)", "met": mx <= TARGET_RSS,
                  "detail": f"max {_gb(mx)}"})
    for dist in DISTRIBUTIONS:
        g = _growth_upserts(res, engine, dist)
        if len(g) >= 2 and all(r.get("server_peak_rss") for r in g):
            first, last = g[0]["server_peak_rss"], g[-1]["server_peak_rss"]
            failed = any(r.get("server_s") is None for r in g)
            t.append({"target": f"server peak RSS not growing with table size ({dist} keys: upsert at largest <= "
                                f"{RSS_GROWTH_TOLERANCE}x at smallest)",
                      "met": not failed and last <= first * RSS_GROWTH_TOLERANCE,
                      "detail": " -> ".join(f"{_size(r) / 1e6:g}M: " + (
                          _gb(r["server_peak_rss"]) if r.get("server_s") is not None
                          else f">= {_gb(r['server_peak_rss'])} ({_outcome(r)})") for r in g)})
    return [{**x, "engine": engine} for x in t]


def evaluate_issue8_targets(res: dict) -> list[dict]:
    """Issue 8's targets: Spark's growth series within 4 GB and <= 2x slower at 10M than at 1M; the
    largest table Sail upserts within 4 GB, and what happened beyond it."""
    t = []
    engines = _engines(res)
    if "spark" in engines:
        g = _growth_upserts(res, "spark")
        steps = g + [r for r in res["setup"] if _eng(r) == "spark" and r["workload"].startswith("growth")]
        if g:
            largest = max(_size(r) for r in g)
            failed = [r for r in steps if r.get("server_s") is None or r.get("direct")]
            top = max(steps, key=lambda r: r.get("server_peak_rss") or 0)
            mx = top.get("server_peak_rss") or 0
            t.append({"target": f"Spark: the growth series to {largest / 1e6:g}M rows completes with process-tree peak "
                                f"RSS <= {TARGET_TREE_RSS / 1024 ** 3:g} GB (JVM included)",
                      "met": not failed and mx <= TARGET_TREE_RSS,
                      "detail": f"max {_gb(mx)} over {len(steps)} steps (in {top['workload']}"
                                + (f": {top['server_peak_parts']}" if top.get("server_peak_parts") else "") + ")"
                                + (f"; {len(failed)} failed: " + ", ".join(f"{r['workload']} ({_outcome(r)})"
                                                                          for r in failed[:4]) if failed else "")})
        for dist in DISTRIBUTIONS:
            gd = sorted(_growth_upserts(res, "spark", dist), key=_size)
            if len(gd) >= 2:
                a, b = gd[0], gd[-1]
                ok = a.get("server_s") is not None and b.get("server_s") is not None
                ratio = b["server_s"] / a["server_s"] if ok else None
                t.append({"target": f"Spark: upsert ({dist} keys) at {_size(b) / 1e6:g}M <= {TARGET_GROWTH_SLOWDOWN:g}x "
                                    f"the same upsert at {_size(a) / 1e6:g}M",
                          "met": bool(ratio and ratio <= TARGET_GROWTH_SLOWDOWN),
                          "detail": (f"{_s(a.get('server_s'))} s -> {_s(b.get('server_s'))} s ({ratio:.2f}x)" if ok
                                     else f"{_outcome(a)} / {_outcome(b)}")})
    if "sail" in engines:
        for dist in DISTRIBUTIONS:
            gd = sorted(_growth_upserts(res, "sail", dist), key=_size)
            if not gd:
                continue
            within = [r for r in gd if r.get("server_s") is not None and (r.get("server_peak_rss") or 0) <= TARGET_TREE_RSS]
            best = max((_size(r) for r in within), default=None)
            beyond = [r for r in gd if best is None or _size(r) > best]
            killed = [r for r in gd if _outcome_code(r) in ("killed", "died", "failed")]
            detail = (f"largest within {TARGET_TREE_RSS / 1024 ** 3:g} GB: "
                      + (f"{best / 1e6:g}M rows" if best else "none"))
            if beyond:
                detail += "; beyond: " + ", ".join(
                    f"{_size(r) / 1e6:g}M {_outcome(r)} (peak {_gb(r.get('server_peak_rss'))}"
                    + (f", {_s(r.get('server_s'))} s" if r.get("server_s") is not None else "") + ")" for r in beyond)
            t.append({"target": f"Sail ({dist} keys): completes what it can without being killed; beyond, the guard "
                                "refuses clearly",
                      "met": not killed, "detail": detail})
    return t


def evaluate_targets(res: dict) -> list[dict]:
    out = evaluate_issue8_targets(res)
    for e in _engines(res):
        out += [{**x, "target": f"[{e}] {x['target']}"} for x in evaluate_engine_targets(res, e)]
    return out


PLOT_STYLE = {"sail": "tab:blue", "spark": "tab:orange"}


def plot(res: dict, path: Path) -> bool:
    if not any(r["workload"].startswith("growth: upsert") for r in res["results"]):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6))
    cap = res.get("rss_cap_gb")
    xs: set = set()
    base_done = set()
    for e in _engines(res):
        for dist in DISTRIBUTIONS:
            g = sorted(_growth_upserts(res, e, dist), key=_size)
            if not g:
                continue
            x = [_size(r) / 1e6 for r in g]
            xs.update(x)
            ls = "-" if dist == "uniform" else "--"
            color = PLOT_STYLE.get(e)
            ax1.plot(x, [r.get("server_s") or np.nan for r in g], "o" + ls, color=color, label=f"{e}, {dist} keys")
            ax2.plot(x, [(r.get("server_peak_rss") or 0) / 1024 ** 3 for r in g], "o" + ls, color=color,
                     label=f"{e}, {dist} keys")
            if dist not in base_done:  # one shared baseline
                base_done.add(dist)
                ax1.plot(x, [r.get("baseline_s") or np.nan for r in g], "s" + ls, color="gray", alpha=0.7,
                         label=f"delta-rs baseline, {dist} keys")
            for xi, r in zip(x, g):
                if r.get("server_s") is None:
                    y = (r.get("server_peak_rss") or 0) / 1024 ** 3
                    ax2.plot([xi], [y], "x", color="red", ms=12, mew=2)
                    what = (f"killed at the {cap:g} GB cap" if _outcome_code(r) == "killed" and cap
                            else _outcome(r))
                    ax2.annotate(f"{e} {dist}: {what}", (xi, y), textcoords="offset points", xytext=(-8, -14),
                                 ha="right", fontsize=7, color="red")
    n_rows = next(r["rows"] for r in res["results"] if r["workload"].startswith("growth: upsert"))
    ax1.set_yscale("log")
    ax1.set_ylabel(f"seconds ({n_rows:,}-row upsert, 50% new keys; log scale)")
    ax1.set_title("Incremental upsert time")
    ax2.axhline(TARGET_TREE_RSS / 1024 ** 3, color="red", lw=0.8, ls=":", label="4 GB target")
    ax2.set_ylabel("GB (process tree, JVM included)")
    ax2.set_title("Peak RSS during the upsert")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("table size (million rows)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        ticks = sorted(xs)
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{v:.3g}" for v in ticks])
    fig.suptitle(f"Growth: the incremental upsert at increasing table size, per engine and key distribution "
                 f"(scale {res['scale']:g})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _row(r: dict) -> str:
    mbps = r.get("mb_per_s")
    cpu = r.get("server_cpu_s")
    ratio = r.get("ratio")
    err = f" ({_outcome(r)})" if r.get("server_error") else ""
    return (f"| {r['workload']}{err} | {_eng(r)} | {r['rows']:,} | {r['input_bytes'] / 1e6:.1f} | {_s(r.get('server_s'))} | "
            f"{_rate(r.get('rows_per_s'))} | {'-' if not mbps else format(mbps, '.1f')} | "
            f"{_gb(r.get('server_rss_before'))} | {_gb(r.get('server_peak_rss'))} | "
            f"{'-' if cpu is None else format(cpu, '.1f')} | "
            f"{_s(r.get('baseline_s'))} | {_gb(r.get('baseline_peak_rss'))} | "
            f"{'-' if not ratio else format(ratio, '.2f') + 'x'} |")


TABLE_HEAD = ("| workload | engine | rows | input MB | server s | rows/s | MB/s | server RSS before | server peak RSS | "
              "server CPU s | baseline s | baseline peak RSS | server/baseline |\n"
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def comparison_table(res: dict) -> list[str]:
    """One row per workload, the engines side by side against the one shared baseline."""
    engines = _engines(res)
    order: list[str] = []
    cell: dict = {}
    for r in res["results"]:
        if r["workload"] not in order:
            order.append(r["workload"])
        cell[(r["workload"], _eng(r))] = r
    head = "| workload | baseline s | " + " | ".join(f"{e} s | {e} peak RSS | {e}/baseline" for e in engines) + " |"
    sep = "|---|---:|" + "---:|---:|---:|" * len(engines)
    lines = [head, sep]
    for w in order:
        any_r = next(cell[(w, e)] for e in engines if (w, e) in cell)
        parts = [w, _s(any_r.get("baseline_s"))]
        for e in engines:
            r = cell.get((w, e))
            if r is None:
                parts += ["-", "-", "-"]
                continue
            parts += [_s(r.get("server_s")) if r.get("server_s") is not None else _outcome(r),
                      _gb(r.get("server_peak_rss")),
                      format(r["ratio"], ".2f") + "x" if r.get("ratio") else "-"]
        lines.append("| " + " | ".join(parts) + " |")
    return lines


def growth_table(res: dict) -> list[str]:
    """Upsert seconds and tree peak RSS per engine x key distribution x table size."""
    sizes = sorted({_size(r) for r in res["results"] if r["workload"].startswith("growth: upsert")})
    if not sizes:
        return []
    head = "| engine | keys | " + " | ".join(f"{s / 1e6:g}M s | {s / 1e6:g}M peak RSS" for s in sizes) + \
           f" | {sizes[-1] / 1e6:g}M / {sizes[0] / 1e6:g}M |"
    lines = [head, "|---|---|" + "---:|---:|" * len(sizes) + "---:|"]
    rows = [("delta-rs baseline", None)] + [(e, e) for e in _engines(res)]
    for label, e in rows:
        for dist in DISTRIBUTIONS:
            g = {_size(r): r for r in _growth_upserts(res, e or _engines(res)[0], dist)}
            if not g:
                continue
            parts = [label, dist]
            for s in sizes:
                r = g.get(s)
                if r is None:
                    parts += ["-", "-"]
                elif e is None:
                    parts += [_s(r.get("baseline_s")), _gb(r.get("baseline_peak_rss"))]
                else:
                    parts += [_s(r.get("server_s")) if r.get("server_s") is not None else f"**{_outcome(r)}**",
                              _gb(r.get("server_peak_rss"))]
            a, b = g.get(sizes[0]), g.get(sizes[-1])
            k = "baseline_s" if e is None else "server_s"
            parts.append(f"{b[k] / a[k]:.2f}x" if a and b and a.get(k) and b.get(k) else "-")
            lines.append("| " + " | ".join(parts) + " |")
    return lines


def write_report(res: dict, out: Path, png: Optional[Path]) -> Path:
    m = res["machine"]
    v = m["versions"]
    lines = ["# Benchmarks", "",
             f"Generated by `make bench` (`{res['command']}`) on {res['started']} (finished {res['finished']}); "
             "edit scripts/bench.py, not this file.", ""]
    engines = _engines(res)
    lines += [f"Engines: {', '.join(engines)}, each with its own server process and warehouse, measured step by "
              "step against ONE bare delta-rs baseline (the baseline applies each step's files once). Peak RSS is "
              "the whole process tree of the server: for Spark, the destination's Python process plus the Spark "
              f"Connect JVM it starts (driver memory {res.get('spark_driver_memory', '2g')}).", ""]
    i8 = evaluate_issue8_targets(res)
    if i8:
        lines += ["## Targets (issue 8: engines and tables past 10M rows)", "", "| target | met | measured |",
                  "|---|---|---|"]
        for t in i8:
            lines.append(f"| {t['target']} | {'met' if t['met'] else '**not met**'} | {t['detail']} |")
        lines += [""]
    lines += ["## Targets (issue 4), per engine", "", "| engine | target | met | measured |", "|---|---|---|---|"]
    for e in engines:
        for t in evaluate_engine_targets(res, e):
            lines.append(f"| {e} | {t['target']} | {'met' if t['met'] else '**not met**'} | {t['detail']} |")
    lines += [""]
    gt = growth_table(res)
    if gt:
        lines += ["## Growth at a glance", "",
                  "The 100k-row upsert (half new keys) at each table size, per engine and key distribution "
                  "(uniform: existing keys drawn from the whole table; recent: 90% of them among the newest 10% "
                  "of keys). Seconds as the client sees them, peak RSS of the server's process tree.", ""] + gt + [""]
        parts = [f"{_eng(r)} {_size(r) / 1e6:g}M {r.get('distribution', 'uniform')}: {r['server_peak_parts']}"
                 for r in res["results"] if r["workload"].startswith("growth: upsert") and r.get("server_peak_parts")
                 and _eng(r) != "sail"]
        if parts:
            lines += ["The process tree at each non-embedded upsert's peak (processes over 16 MB):", ""] + \
                     [f"- {p}" for p in parts] + [""]
    if res["failures"]:
        lines += ["## Failures", ""]
        lines += [f"- `{x[:600]}`" for x in res["failures"]]
        if res.get("server_severe_log"):
            lines += ["", "Server SEVERE log lines:", "", "```"] + [x[:400] for x in res["server_severe_log"]] + ["```"]
        lines += [""]
    if res.get("events"):
        lines += ["## Events", ""] + [f"- {e}" for e in res["events"]] + [""]
    lines += ["## Results", "",
              "Server s = wall time of the RPC(s) as the client sees it (Fivetran's view). rows/s and MB/s are "
              "input rows and compressed+encrypted input bytes per server second. Peak RSS = the largest resident "
              "set of the server's process tree (Sail is embedded: one process; Spark: the server plus its JVM) "
              "sampled every 0.1 s during "
              "the workload (GB = 2^30 bytes); RSS before = the server's resident set when the step started (what it kept from earlier steps). "
              "Server CPU s = user+system CPU of the server's process tree (JVM included) during the step (2 cores: "
              "at most 2 x wall). server/baseline = server s / baseline s (lower is better; the target is <= 1.5). "
              "The engines run one after the other in each step, then the baseline once.",
              "", "Side by side:", ""] + comparison_table(res) + ["", "All figures:", "", TABLE_HEAD]
    lines += [_row(r) for r in res["results"]]
    if res["setup"]:
        lines += ["", "Setup steps (building the history table and the growth table; each request is 1M rows "
                  "through WriteBatch / WriteHistoryBatch, the initial-load path; the baseline appends):", "",
                  TABLE_HEAD]
        lines += [_row(r) for r in res["setup"]]
    checks = [c for c in res["results"] + res["setup"] if "rows_server" in c]
    if checks:
        mism = [c for c in checks if c.get("rows_server") != c.get("rows_baseline") or c.get("equal") is False]
        lines += ["", f"Consistency: after each step each engine's and the baseline's tables were compared "
                  f"({'row counts and full contents' if res['scale'] <= 0.05 else 'row counts'}): "
                  + ("all equal." if not mism else "MISMATCH in " + ", ".join(
                      f"{c['workload']} [{_eng(c)}] ({c.get('rows_server')} vs {c.get('rows_baseline')} "
                      f"{c.get('compare_note', '')})"
                      for c in mism))]
        if res["failures"]:
            lines[-1] += (" Steps where the server failed were not compared; after a failed server upsert the two "
                          "growth tables differ by that upsert's new keys.")
    if png is not None:
        lines += ["", "## Growth", "",
                  "The incremental upsert (100k rows, half new keys) repeated as the table grows to 1M, 3M and 10M "
                  "rows (one growth table per engine, built by appending 1M-row batches through the server; see the "
                  "setup steps). At each size two upserts run, in this order: `uniform` (existing keys drawn from "
                  "the whole table), then `recent` (90% of the existing keys among the newest 10% of the appended "
                  "keys, the rest uniform over the older ones); both add 50k new keys, so the table grows by 50k "
                  "rows with each. Each growth upsert runs on freshly started servers (same warehouses), so its peak "
                  "RSS is what that upsert needs at that table size; what a long-running server accumulates is the "
                  "'RSS before' column of the setup steps. A server killed at the RSS safety cap and a MERGE refused "
                  "by the memory guard (gRPC RESOURCE_EXHAUSTED) are reported apart. If an engine's append fails, "
                  "the rest of its table is appended with delta-rs directly (marked `[delta-rs direct]`) so its "
                  "upserts can still be measured.", "",
                  f"![growth]({png.name})", ""]
    lines += ["## Machine", "",
              f"- {m['nproc']} CPUs ({m['cpu']}), {m['memory_gb']} GB RAM, Linux {m['kernel']}",
              f"- Python {m['python']}, pyspark {v.get('pyspark')}, pyspark-client {v.get('pyspark-client')}, "
              f"delta-spark {v.get('delta-spark')}, pysail {v.get('pysail')}, "
              f"deltalake {v.get('deltalake')}, pyarrow {v.get('pyarrow')}, grpcio {v.get('grpcio')}, "
              f"zstandard {v.get('zstandard')}, cryptography {v.get('cryptography')}, numpy {v.get('numpy')}",
              f"- load average at start {m['loadavg_start']}, at end {res['loadavg_end']}; per-workload 1-min load "
              f"before each step is in bench-results.json. Other test suites may share this 2-core machine, so "
              f"single numbers are noisy (expect +-20%); ratios are measured back to back.",
              f"- code: git {m.get('git', {}).get('head', '?')}"
              + (f" plus uncommitted changes in {', '.join(m['git']['server_changes'])}"
                 if m.get("git", {}).get("server_changes") else ""),
              ]
    starts, idle, trees = (_per_engine(res, "server_startup_s"), _per_engine(res, "server_idle_rss"),
                           _per_engine(res, "server_tree"))
    restarts = res.get("server_restarts_s") or {}
    for e in engines:
        again = restarts.get(e, [])[1:]
        lines.append(f"- {e}: server start-up (process + engine, to SERVING) {starts.get(e) or 0:.1f} s"
                     + (f" (later restarts {min(again):.1f}-{max(again):.1f} s, {len(again)}x)" if again else "")
                     + f"; idle RSS of the process tree {_gb(idle.get(e))}"
                     + (f" ({', '.join(trees[e])})" if trees.get(e) else ""))
    if res.get("run_minutes"):
        lines.append(f"- the whole run took {res['run_minutes']:g} minutes")
    lines += [""]
    lines += ["## How to run", "", "```sh", "make bench                                   # = .venv/bin/python scripts/bench.py",
              ".venv/bin/python scripts/bench.py --scale 0.01   # quick check (reports to bench-data/report/)",
              ".venv/bin/python scripts/bench.py --only upsert  # one workload (+ what it needs first)",
              ".venv/bin/python scripts/bench.py --engines spark --only growth   # one engine",
              "DELTA_DESTINATION_SPARK_DRIVER_MEMORY=3g .venv/bin/python scripts/bench.py --engines spark",
              ".venv/bin/python scripts/bench.py --skip-growth --no-profile",
              ".venv/bin/python scripts/bench.py --only growth --rss-cap-gb 14 --out /tmp/g  # a higher safety cap",
              ".venv/bin/python scripts/bench.py --report-only docs/bench-results.json   # re-render this page",
              "```", "",
              f"A server's process tree and the baseline worker are killed (and the step recorded as failed) above "
              f"{res.get('rss_cap_gb', 8):g} GB RSS, so a runaway engine cannot take a shared machine down.", "",
              f"This run: `{res['command']}`. Batch files are generated once per seed and scale under "
              f"`bench-data/` (gitignored) and reused; generation took {res['generate_s']:.0f} s in this run "
              "(0 when cached) and is not part of any measurement.", ""]
    lines += ["## Workloads", "",
              "All batch files are CSV in Fivetran's conventions (header row in a shuffled column order, minimal "
              "`\"` quoting with doubled quotes, values with commas/quotes/newlines, ~3% NULLs as `null_string`, "
              "`unmodified_string` in update files), zstd-compressed and AES-256-CBC encrypted (IV first, PKCS#7) "
              "with a key per file; files hold at most 250k wide rows (about 35 MB), well under Fivetran's ~100 MB.",
              "",
              "- wide table: 20 columns: id LONG (key), INT, SHORT, DECIMAL(18,4), DOUBLE, FLOAT, BOOLEAN, "
              "NAIVE_DATE, NAIVE_DATETIME, UTC_DATETIME, 4 STRING (name, email, free text, status), JSON, BINARY "
              "(base64), NAIVE_TIME, LONG, `_fivetran_deleted`, `_fivetran_synced`.",
              "- initial_load: the 1M rows into the empty table, one WriteBatch with 4 replace files.",
              "- upsert: 100k rows, 50k existing keys (uniform over the table) + 50k new keys.",
              "- partial_update: 100k existing keys in an update file, ~70% of the non-key cells `unmodified_string`.",
              "- hard_delete: 100k existing keys in a delete file (id, `_fivetran_synced`).",
              "- soft_truncate: Truncate with `soft.deleted_column=_fivetran_deleted` and a cut after every sync time: "
              "every row is marked deleted (rows = table size).",
              "- narrow_load: 2M rows x 4 columns (LONG key, STRING, DOUBLE, `_fivetran_synced`) into an empty table, "
              "2 files, one WriteBatch.",
              "- history: a 22-column history-mode table (the wide columns without `_fivetran_deleted`, plus "
              "`_fivetran_start` (key), `_fivetran_end`, `_fivetran_active`) loaded with 1M active versions "
              "(WriteHistoryBatch, setup), then one WriteHistoryBatch with 100k earliest_start rows and 100k new "
              "versions (replace files) of existing keys.",
              "- growth: a second wide table per engine: the 1M initial load, the uniform upsert (the same file as "
              "`upsert`) and a recent-keys upsert, then 1M-row appends to 3M, two fresh 100k upserts (keys drawn "
              "from 0..3M, 50k new each), appends to 10M, and again.", ""]
    lines += ["## The baseline", "",
              "No gRPC and no Spark: `server.batch_reader.read_batch_file` (the server's own streaming reader: "
              "decrypt, zstd, pyarrow.csv, typed Arrow) then delta-rs, in a separate worker process "
              "(scripts/bench_baseline.py):", "",
              "- loads into an empty table / appends of new keys: `write_deltalake(mode=\"append\")` (the server "
              "must MERGE: a WriteBatch cannot know the keys are new);",
              "- upsert: `merge(t.id = s.id).when_matched_update_all().when_not_matched_insert_all()`;",
              "- partial update: `merge(...).when_matched_update({c: CASE WHEN s.u_c THEN t.c ELSE s.c END})`, "
              "unmatched keys ignored;",
              "- hard delete: `merge(...).when_matched_delete()`;",
              "- soft truncate: `update({_fivetran_deleted: true}, _fivetran_synced < cut AND NOT deleted)`;",
              "- history: one `merge(t.id = s.id)` over the earliest_start rows that deletes versions with "
              "start >= the earliest start and closes the active version (`_fivetran_active=false`, "
              "`_fivetran_end = start - 1 ms`), then `write_deltalake(append)` of the new versions. Differences "
              "from the server: two commits instead of one (not atomic), no replay handling for versions that "
              "already exist at the same start, no update-file fill, and the new versions are appended, not "
              "merged — it is the cheapest correct plan for this workload, so the ratio is an upper bound.", ""]
    prof = res.get("profiles") or {}
    lines += ["## Profiles", ""]
    if not prof:
        lines += ["(not run: --no-profile)", ""]
    elif "error" in prof:
        lines += [f"Profiling failed: {prof['error']}", ""]
    else:
        lines += ["The initial load and the upsert again, on a fresh server started through "
                  "scripts/bench_profile_server.py (embedded Sail), which runs pyinstrument (2 ms sampling, wall clock) inside the "
                  "WriteBatch handler thread. Time inside the embedded Sail engine appears as the Spark Connect "
                  "client waiting (gRPC `_execute_and_fetch` / `ToArrow`/`collect`), since Sail's Rust threads are "
                  "not Python. Phases are the outermost calls of the named functions.", ""]
        for label, p in prof.items():
            if "error" in p:
                lines += [f"### {label}", "", f"failed: {p['error']}", ""]
                continue
            lines += [f"### {label} ({p['seconds']:.1f} s under the profiler)", "", "| phase | s | share |",
                      "|---|---:|---:|"]
            for ph in p.get("phases", []):
                lines.append(f"| {ph['phase']} | {ph['seconds']:.2f} | {ph['share'] * 100:.0f}% |")
            if p.get("self_top"):
                lines += ["", "Largest self times (leaf frames):", "", "| frame | s | share |", "|---|---:|---:|"]
                for s in p["self_top"][:8]:
                    lines.append(f"| `{s['frame']}` | {s['seconds']:.2f} | {s['share'] * 100:.0f}% |")
            lines += ["", "<details><summary>pyinstrument tree (top)</summary>", "", "```", p.get("tree", ""), "```",
                      "", "</details>", ""]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "benchmarks.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every row count (e.g. 0.01 for a quick check)")
    ap.add_argument("--only", choices=WORKLOADS, help="run one workload (and the ones it needs first)")
    ap.add_argument("--skip-growth", action="store_true", help="skip the 1M/3M/10M growth runs")
    ap.add_argument("--engines", default="sail,spark",
                    help="comma-separated engines to measure side by side (sail, spark); default: both")
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
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    bad = [e for e in args.engines if e not in ENGINE_CHOICES]
    if bad or not args.engines or len(set(args.engines)) != len(args.engines):
        ap.error(f"--engines: a comma-separated list of {', '.join(ENGINE_CHOICES)} without repeats, got {bad or args.engines}")
    full = args.scale == 1.0 and not args.only and not args.skip_growth and set(args.engines) == set(ENGINE_CHOICES)
    out = args.out or (DOCS if full else DATA_ROOT / "report")
    if args.report_only:
        res = json.loads(args.report_only.read_text())
    else:
        res = Bench(args).run()
    out.mkdir(parents=True, exist_ok=True)
    png = out / "bench-growth.png"
    has_png = plot(res, png)
    (out / "bench-results.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    path = write_report(res, out, png if has_png else None)
    print(f"\nreport: {path}")
    for t in evaluate_targets(res):
        print(f"  [{'met' if t['met'] else 'NOT MET'}] {t['target']}: {t['detail']}")
    if res["failures"]:
        print("failures:")
        for x in res["failures"]:
            print("  " + x[:500])
    return 0


if __name__ == "__main__":
    sys.exit(main())
