"""Benchmark: Fivetran-like workloads through the real gRPC server vs a bare delta-rs baseline.

    .venv/bin/python scripts/bench.py                 # everything (make bench); writes docs/benchmarks.md
    .venv/bin/python scripts/bench.py --scale 0.01    # every row count x0.01: a quick check
    .venv/bin/python scripts/bench.py --only upsert   # one workload (and what it needs first)
    .venv/bin/python scripts/bench.py --skip-growth   # without the 1M/3M/10M growth runs

Workload files are generated once per (seed, scale) under bench-data/ (encrypted
zstd CSV in Fivetran's conventions, see scripts/bench_data.py) and reused.  The
server runs as a subprocess (`python -m delta_destination.fivetran.main`) on a free port with its own
temporary warehouse; its RSS (process + children) is sampled every 0.1 s and each
RPC is timed.  The baseline (scripts/bench_baseline.py) applies the identical
files with server.batch_reader + delta-rs in a separate worker process, sampled
the same way.  A full run (scale 1, all workloads) writes docs/benchmarks.md,
docs/bench-results.json and docs/bench-growth.png; partial runs write to
bench-data/report/ instead.
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

def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


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

    A process over its cap is killed (SIGKILL, by pid: only processes this
    script started) so a runaway engine cannot take the shared machine down;
    the step that was running records the failure.
    """

    def __init__(self, interval: float = 0.1, cap: Optional[int] = None):
        super().__init__(daemon=True, name="rss-sampler")
        self.interval = interval
        self.cap = cap
        self.procs: dict[str, psutil.Process] = {}
        self.peaks: dict[str, int] = {}
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
                self.peaks[name] = _tree_rss(p)

    def _sample(self, name: str, p: psutil.Process) -> None:
        rss = _tree_rss(p)
        self.peaks[name] = max(self.peaks.get(name, 0), rss)
        if self.cap and rss > self.cap and name not in self.capped:
            self.capped[name] = rss
            try:
                p.kill()
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
    def __init__(self, warehouse: Path, log_path: Path, command: Optional[list[str]] = None, env: Optional[dict] = None):
        self.port = _free_port()
        self.warehouse = warehouse
        self.log_path = log_path
        self._log = open(log_path, "ab")
        cmd = command or [sys.executable, "-m", "delta_destination.fivetran.main"]
        self.proc = subprocess.Popen([*cmd, "--port", str(self.port), "--warehouse", str(warehouse)], cwd=ROOT,
                                     stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = destination_sdk_pb2_grpc.DestinationConnectorStub(self.channel)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 120.0) -> None:
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
    pass


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
        raise RpcFailed(f"{what}: gRPC {e.code().name}: {e.details()}") from None
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
        self.gen = bd.Generator(DATA_ROOT, args.seed, args.scale)
        self.results: list[dict] = []   # reported workloads
        self.setup: list[dict] = []     # setup steps (growth appends, history load)
        self.failures: list[str] = []
        self.checks: list[dict] = []
        self.events: list[str] = []
        self.restarts = 0
        self.server: Optional[Server] = None
        self.n = self.gen.n
        self.N = self.n(1_000_000)
        self.U = self.n(100_000)
        self.growth_sizes = [self.N, self.n(3_000_000), self.n(10_000_000)]

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
                prev = size
        return f

    # ---- one measured step -----------------------------------------------------------------
    def step(self, name: str, *, rows: int, specs=(), server_fn: Callable[[], None],
             baseline_fn: Optional[Callable[[], dict]], table_size: Optional[int] = None, setup=False,
             table: Optional[str] = None) -> dict:
        in_bytes = sum(s.bytes for s in specs)
        r = {"workload": name, "rows": rows, "files": len(specs), "input_bytes": in_bytes, "table_size": table_size,
             "loadavg_before": round(os.getloadavg()[0], 2)}
        print(f"  {name}: {rows:,} rows, {len(specs)} files, {in_bytes / 1e6:.1f} MB ...", flush=True)
        srv = psutil.Process(self.server.proc.pid)
        self.sampler.reset()
        r["server_rss_before"] = self.sampler.peak("server")
        cpu0 = _tree_cpu(srv)
        t = time.perf_counter()
        try:
            server_fn()
            r["server_s"] = time.perf_counter() - t
        except Exception as e:  # noqa: BLE001
            took = time.perf_counter() - t
            r["server_s"] = None
            r["server_failed_after_s"] = took
            r["server_error"] = str(e)[:2000]
            time.sleep(0.3)
            capped = self.sampler.capped.get("server")
            if capped:
                r["server_error"] = (f"killed by the benchmark after {took:.0f} s: server RSS reached "
                                     f"{capped / 1024 ** 3:.1f} GB, over the {self.args.rss_cap_gb:g} GB safety cap "
                                     f"(target 2 GB) | {r['server_error'][:300]}")
            elif not self.server.alive():
                r["server_error"] += " | server process died: " + self.server.log_tail(1500)
            self.failures.append(f"{name}: {r['server_error']}")
            print(f"    SERVER FAILED after {took:.1f}s: {r['server_error'][:500]}", flush=True)
        r["server_cpu_s"] = _tree_cpu(srv) if self.server.alive() else None
        if r["server_cpu_s"] is not None:
            r["server_cpu_s"] -= cpu0
        r["server_peak_rss"] = self.sampler.peak("server")
        if not self.server.alive():
            self.restart_server(f"after the failure of {name}")
        if baseline_fn is not None:
            self.sampler.reset()
            try:
                res = baseline_fn()
                r["baseline_s"] = res["seconds"]
                r["baseline_read_s"] = res.get("read_s")
                r["baseline_write_s"] = res.get("write_s")
            except Exception as e:  # noqa: BLE001
                r["baseline_s"] = None
                r["baseline_error"] = str(e)[-2000:]
                time.sleep(0.3)
                if self.sampler.capped.get("baseline"):
                    r["baseline_error"] = (f"killed by the benchmark: baseline RSS over the "
                                           f"{self.args.rss_cap_gb:g} GB safety cap")
                self.failures.append(f"{name} (baseline): {r['baseline_error'][-600:]}")
                print(f"    BASELINE FAILED: {r['baseline_error'][-800:]}", flush=True)
            r["baseline_peak_rss"] = self.sampler.peak("baseline")
            if not self.bl.proc.is_alive():
                self.restart_baseline(f"after the baseline failure of {name}")
        if r.get("server_s") and r.get("baseline_s"):
            r["ratio"] = r["server_s"] / r["baseline_s"]
        if r.get("server_s"):
            r["rows_per_s"] = rows / r["server_s"]
            r["mb_per_s"] = in_bytes / 1e6 / r["server_s"] if in_bytes else None
        if table and r.get("server_s") is not None:
            r.update(self.verify(table))
        print("    " + ", ".join(f"{k}={_fmt(v)}" for k, v in r.items()
                                 if k in ("server_s", "baseline_s", "ratio", "rows_per_s", "server_peak_rss",
                                          "baseline_peak_rss", "server_cpu_s", "rows_server", "rows_baseline",
                                          "equal")), flush=True)
        (self.setup if setup else self.results).append(r)
        return r

    @property
    def stub(self):
        return self.server.stub  # looked up per call: the server may have been restarted

    def restart_server(self, why: str) -> None:
        """A new server process on the same warehouse (the tables stay)."""
        if self.server is not None:
            self.server.stop()
        t = time.monotonic()
        self.restarts += 1
        self.server = Server(self.warehouse, self.tmp / f"server-{self.restarts}.log")
        self.sampler.watch("server", self.server.proc.pid)
        self.events.append(f"server restarted {why} ({time.monotonic() - t:.1f} s to SERVING)")
        print(f"    server restarted {why}", flush=True)

    def restart_baseline(self, why: str) -> None:
        self.bl.stop()
        self.bl = BaselineProc()
        self.sampler.watch("baseline", self.bl.pid)
        self.events.append(f"baseline worker restarted {why}")

    def verify(self, table: str) -> dict:
        """Row counts of the server's and the baseline's tables (and full equality on small runs)."""
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
        self.checks.append({"table": table, **out})
        return out

    def srv_path(self, table: str) -> str:
        return str(self.warehouse / SCHEMA / table)

    def bl_path(self, table: str) -> str:
        return str(self.bl_root / table)

    def _create(self, table: TableSchema) -> None:
        create_table(self.server.stub, table)
        self.bl.call("create", path=self.bl_path(table.name), table=table.name)

    # ---- workloads -------------------------------------------------------------------------
    def run_wide_chain(self, f: dict) -> None:
        W = bd.WIDE
        chain = [w for w in WORKLOADS[:5] if w in self.selected]
        if not chain:
            return
        self._create(W)
        r = self.step("initial_load", rows=self.N, specs=f["init"], table="wide", table_size=0,
                      server_fn=lambda: write_batch(self.stub, W, replace=f["init"], label="initial_load"),
                      baseline_fn=lambda: self.bl.call("load", path=self.bl_path("wide"), table="wide",
                                                       files=_files(f["init"])))
        if r.get("server_s") is None:
            return
        if "upsert" in chain:
            self.step("upsert", rows=self.U, specs=f["upsert"], table="wide", table_size=self.N,
                      server_fn=lambda: write_batch(self.stub, W, replace=f["upsert"], label="upsert"),
                      baseline_fn=lambda: self.bl.call("upsert", path=self.bl_path("wide"), table="wide",
                                                       files=_files(f["upsert"])))
        if "partial_update" in chain:
            self.step("partial_update", rows=self.U, specs=f["update"], table="wide", table_size=self.N + self.U // 2,
                      server_fn=lambda: write_batch(self.stub, W, update=f["update"], label="partial_update"),
                      baseline_fn=lambda: self.bl.call("update", path=self.bl_path("wide"), table="wide",
                                                       files=_files(f["update"])))
        if "hard_delete" in chain:
            self.step("hard_delete", rows=self.U, specs=f["delete"], table="wide", table_size=self.N + self.U // 2,
                      server_fn=lambda: write_batch(self.stub, W, delete=f["delete"], label="hard_delete"),
                      baseline_fn=lambda: self.bl.call("delete", path=self.bl_path("wide"), table="wide",
                                                       files=_files(f["delete"])))
        if "soft_truncate" in chain:
            size = self.bl.call("count", path=self.srv_path("wide"))["rows"]
            before = dt.datetime.fromtimestamp(bd.TRUNCATE_BEFORE_MS / 1000, dt.timezone.utc)
            self.step("soft_truncate", rows=size, table="wide", table_size=size,
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
        r = self.step("history: initial load (setup)", rows=self.N, specs=f["hist_init"], table="hist", table_size=0,
                      setup=True,
                      server_fn=lambda: write_history_batch(self.stub, H, replace=f["hist_init"], label="history_load"),
                      baseline_fn=lambda: self.bl.call("load", path=self.bl_path("hist"), table="hist",
                                                       files=_files(f["hist_init"])))
        if r.get("server_s") is None:
            return
        specs = f["hist_earliest"] + f["hist_versions"]
        self.step("history", rows=self.U, specs=specs, table="hist", table_size=self.N,
                  server_fn=lambda: write_history_batch(self.stub, H, earliest=f["hist_earliest"],
                                                        replace=f["hist_versions"], label="history"),
                  baseline_fn=lambda: self.bl.call("history", path=self.bl_path("hist"), table="hist",
                                                   earliest=_files(f["hist_earliest"]),
                                                   replace=_files(f["hist_versions"])))

    def run_growth(self, f: dict) -> None:
        """Grow a second wide table 1M -> 3M -> 10M with 1M-row WriteBatch appends (the initial-load
        path) and measure the 100k upsert at each size, each on a freshly started server so the peak RSS
        belongs to that upsert at that table size (what a long-running server accumulates shows in the
        setup steps' RSS). If an append fails (e.g. killed at the RSS cap), the rest of that growth table
        is appended with delta-rs straight into the server's table, so the upsert can still be measured."""
        G = bd.TABLES["growth"]
        self._create(G)
        sizes = self.growth_sizes
        per_req = self.n(bd.ROWS_PER_REQUEST)
        small = self.args.scale <= 0.05
        direct = False

        def load(group: str, size_before: int, label: str) -> None:
            nonlocal direct
            for j, req in enumerate(bd.chunked(f[group], per_req)):
                rows = sum(s.rows for s in req)
                name = f"growth: append {rows:,} rows at {size_before:,} ({label} {j + 1})"
                if direct:
                    self.step(name + " [delta-rs direct]", rows=rows, specs=req, setup=True, table_size=size_before,
                              server_fn=lambda req=req: self.bl.call("load", path=self.srv_path("growth"),
                                                                     table="growth", files=_files(req)),
                              baseline_fn=lambda req=req: self.bl.call("load", path=self.bl_path("growth"),
                                                                       table="growth", files=_files(req)))
                else:
                    r = self.step(name, rows=rows, specs=req, setup=True, table_size=size_before,
                                  table="growth" if small else None,
                                  server_fn=lambda req=req, j=j: write_batch(self.stub, G, replace=req,
                                                                             label=f"growth_{group}_{j}"),
                                  baseline_fn=lambda req=req: self.bl.call("load", path=self.bl_path("growth"),
                                                                           table="growth", files=_files(req)))
                    if r.get("server_s") is None:
                        direct = True
                        self.events.append(f"growth: WriteBatch append failed at {size_before:,} rows; the rest of "
                                           "the growth table is appended with delta-rs directly into the server's table")
                        self.step(name + " [delta-rs direct, after the server failed]", rows=rows, specs=req,
                                  setup=True, table_size=size_before, baseline_fn=None,
                                  server_fn=lambda req=req: self.bl.call("load", path=self.srv_path("growth"),
                                                                         table="growth", files=_files(req)))
                size_before += rows

        load("init", 0, "load")
        extra = 0  # new keys added by earlier upserts
        for i, size in enumerate(sizes):
            if i:
                load(f"g_append_{i}", sizes[i - 1] + extra, "append")
            group = "upsert" if i == 0 else f"g_upsert_{i}"
            self.restart_server(f"(fresh server for the growth upsert at {size:,} rows)")
            # warm-up outside the measurement: the first request on a new server reads the table's metadata
            self.stub.DescribeTable(pb.DescribeTableRequest(schema_name=SCHEMA, table_name=G.name), timeout=600)
            self.step(f"growth: upsert at {size / 1e6:g}M", rows=self.U, specs=f[group], table="growth",
                      table_size=size + extra,
                      server_fn=lambda group=group, i=i: write_batch(self.stub, G, replace=f[group],
                                                                     label=f"growth_upsert_{i}"),
                      baseline_fn=lambda group=group: self.bl.call("upsert", path=self.bl_path("growth"),
                                                                   table="growth", files=_files(f[group])))
            extra += self.U - self.U // 2

    # ---- profiles --------------------------------------------------------------------------
    def run_profiles(self, f: dict) -> dict:
        """Initial load and incremental upsert again, on a server with pyinstrument in its handlers."""
        out_dir = self.tmp / "profiles"
        wh = self.tmp / "warehouse-profile"
        print("profiling: server under pyinstrument (initial load, upsert)", flush=True)
        srv = Server(wh, self.tmp / "server-profile.log",
                     command=[sys.executable, str(ROOT / "scripts" / "bench_profile_server.py")],
                     env={"BENCH_PROFILE_DIR": str(out_dir)})
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
                print(f"  {label}: {took:.1f}s under the profiler", flush=True)
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
        print(f"workloads: {', '.join(chain)} (scale {a.scale:g}, seed {a.seed})", flush=True)
        print(f"generating / reusing batch files under {self.gen.dir}", flush=True)
        t = time.monotonic()
        f = self.files()
        gen_s = time.monotonic() - t
        DATA_ROOT.mkdir(exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="run-", dir=DATA_ROOT))
        self.warehouse = self.tmp / "warehouse"
        self.bl_root = self.tmp / "baseline"
        self.bl_root.mkdir()
        facts = machine_facts()
        self.sampler = Sampler(cap=int(a.rss_cap_gb * 1024 ** 3))
        self.sampler.start()
        self.bl = BaselineProc()
        self.sampler.watch("baseline", self.bl.pid)
        print(f"starting the server (warehouse {self.warehouse})", flush=True)
        t = time.monotonic()
        self.server = Server(self.warehouse, self.tmp / "server.log")
        startup_s = time.monotonic() - t
        self.sampler.watch("server", self.server.proc.pid)
        idle_rss = _tree_rss(psutil.Process(self.server.proc.pid))
        profiles = {}
        try:
            self.run_wide_chain(f)
            if "narrow_load" in chain:
                self.run_narrow(f)
            if "history" in chain:
                self.run_history(f)
            if "growth" in chain:
                self.run_growth(f)
        finally:
            server_log = "\n".join(
                (self.tmp / n).read_text(errors="replace") for n in sorted(os.listdir(self.tmp)) if n.startswith("server"))
            self.server.stop()
            self.bl.stop()
            self.sampler.stop()
        if not a.no_profile and "init" in f and "upsert" in f:
            try:
                profiles = self.run_profiles(f)
            except Exception as e:  # noqa: BLE001
                profiles = {"error": str(e)}
        severe = [ln for ln in server_log.splitlines() if '"SEVERE"' in ln]
        res = {
            "started": started.isoformat(timespec="seconds"),
            "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([".venv/bin/python", "scripts/bench.py", *sys.argv[1:]]),
            "scale": a.scale, "seed": a.seed, "machine": facts,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "generate_s": round(gen_s, 1), "generation": self.gen.meta,
            "server_startup_s": startup_s, "server_idle_rss": idle_rss,
            "results": self.results, "setup": self.setup, "failures": self.failures, "events": self.events,
            "rss_cap_gb": a.rss_cap_gb,
            "server_severe_log": severe[-20:], "profiles": profiles,
            "files": {k: {"files": len(v), "rows": sum(s.rows for s in v), "bytes": sum(s.bytes for s in v)}
                      for k, v in f.items()},
        }
        if not a.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            print(f"kept {self.tmp}", flush=True)
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
    for pkg in ("pyspark-client", "pysail", "deltalake", "pyarrow", "grpcio", "zstandard", "cryptography", "numpy"):
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


def evaluate_targets(res: dict) -> list[dict]:
    by = {r["workload"]: r for r in res["results"]}
    t = []
    ratios = [(r["workload"], r.get("ratio")) for r in res["results"]]
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
    peaks = [r.get("server_peak_rss") or 0 for r in res["results"] + res["setup"]]
    if peaks:
        mx = max(peaks)
        t.append({"target": "server peak RSS <= 2 GB (every workload and setup step)", "met": mx <= TARGET_RSS,
                  "detail": f"max {_gb(mx)}"})
    g = [r for r in res["results"] if r["workload"].startswith("growth: upsert")]
    if len(g) >= 2 and all(r.get("server_peak_rss") for r in g):
        first, last = g[0]["server_peak_rss"], g[-1]["server_peak_rss"]
        failed = any(r.get("server_s") is None for r in g)
        t.append({"target": f"server peak RSS not growing with table size (upsert at largest <= {RSS_GROWTH_TOLERANCE}x at smallest)",
                  "met": not failed and last <= first * RSS_GROWTH_TOLERANCE,
                  "detail": " -> ".join(f"{r['workload'].split(' at ')[-1]}: " + (
                      _gb(r["server_peak_rss"]) if r.get("server_s") is not None
                      else f">= {_gb(r['server_peak_rss'])} (killed at the cap)") for r in g)})
    return t


def plot(res: dict, path: Path) -> bool:
    g = [r for r in res["results"] if r["workload"].startswith("growth: upsert")]
    if not g:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["table_size"] / 1e6 for r in g]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax1.plot(x, [r.get("rows_per_s") or np.nan for r in g], "o-", label="server (gRPC + Sail)")
    ax1.plot(x, [r["rows"] / r["baseline_s"] if r.get("baseline_s") else np.nan for r in g], "s--",
             label="bare delta-rs baseline")
    ax1.set_xscale("log")
    ax1.set_xlabel("table size (million rows)")
    ax1.set_ylabel(f"rows/s ({g[0]['rows']:,}-row upsert, 50% new keys)")
    ax1.set_title("Incremental upsert throughput")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend()
    ok = [r.get("server_s") is not None for r in g]
    ax2.plot(x, [(r.get("server_peak_rss") or 0) / 1024 ** 3 for r in g], "o-", label="server peak RSS")
    cap = res.get("rss_cap_gb")
    for xi, r, good in zip(x, g, ok):
        if not good:
            ax2.plot([xi], [(r.get("server_peak_rss") or 0) / 1024 ** 3], "rx", ms=12, mew=2)
            ax2.annotate(f"killed at the {cap:g} GB cap\n(needs more)" if cap else "server failed", (xi, (r.get("server_peak_rss") or 0) / 1024 ** 3),
                         textcoords="offset points", xytext=(-10, -30), ha="right", fontsize=8, color="red")
            ax1.axvline(xi, color="red", lw=0.8, ls=":")
            ax1.annotate("server failed", (xi, ax1.get_ylim()[0]), textcoords="offset points", xytext=(-4, 8),
                         ha="right", fontsize=8, color="red", rotation=90)
    ax2.plot(x, [(r.get("baseline_peak_rss") or 0) / 1024 ** 3 for r in g], "s--", label="baseline peak RSS")
    ax2.axhline(2.0, color="red", lw=0.8, ls=":", label="2 GB target")
    ax2.set_xscale("log")
    ax2.set_xlabel("table size (million rows)")
    ax2.set_ylabel("GB")
    ax2.set_title("Peak RSS during the upsert")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend()
    for ax in (ax1, ax2):
        ax.set_xticks(x)
        ax.set_xticklabels([f"{v:.3g}" for v in x])
    fig.suptitle(f"Growth: the incremental upsert at increasing table size (scale {res['scale']:g})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _row(r: dict) -> str:
    mbps = r.get("mb_per_s")
    cpu = r.get("server_cpu_s")
    ratio = r.get("ratio")
    err = " (server failed)" if r.get("server_error") else ""
    return (f"| {r['workload']}{err} | {r['rows']:,} | {r['input_bytes'] / 1e6:.1f} | {_s(r.get('server_s'))} | "
            f"{_rate(r.get('rows_per_s'))} | {'-' if not mbps else format(mbps, '.1f')} | "
            f"{_gb(r.get('server_rss_before'))} | {_gb(r.get('server_peak_rss'))} | "
            f"{'-' if cpu is None else format(cpu, '.1f')} | "
            f"{_s(r.get('baseline_s'))} | {_gb(r.get('baseline_peak_rss'))} | "
            f"{'-' if not ratio else format(ratio, '.2f') + 'x'} |")


TABLE_HEAD = ("| workload | rows | input MB | server s | rows/s | MB/s | server RSS before | server peak RSS | "
              "server CPU s | baseline s | baseline peak RSS | server/baseline |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def write_report(res: dict, out: Path, png: Optional[Path]) -> Path:
    m = res["machine"]
    v = m["versions"]
    lines = ["# Benchmarks", "",
             f"Generated by `make bench` (`{res['command']}`) on {res['started']} (finished {res['finished']}); "
             "edit scripts/bench.py, not this file.", ""]
    targets = evaluate_targets(res)
    lines += ["## Targets (issue 4)", "", "| target | met | measured |", "|---|---|---|"]
    for t in targets:
        lines.append(f"| {t['target']} | {'met' if t['met'] else '**not met**'} | {t['detail']} |")
    lines += [""]
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
              "set of the process tree (the server embeds Sail, so it is one process) sampled every 0.1 s during "
              "the workload (GB = 2^30 bytes); RSS before = the server's resident set when the step started (what it kept from earlier steps). "
              "Server CPU s = user+system CPU of the server process during the step (2 cores: at most 2 x wall). "
              "server/baseline = server s / baseline s (lower is better; the target is <= 1.5).",
              "", TABLE_HEAD]
    lines += [_row(r) for r in res["results"]]
    if res["setup"]:
        lines += ["", "Setup steps (building the history table and the growth table; each request is 1M rows "
                  "through WriteBatch / WriteHistoryBatch, the initial-load path; the baseline appends):", "",
                  TABLE_HEAD]
        lines += [_row(r) for r in res["setup"]]
    checks = [c for c in res["results"] + res["setup"] if "rows_server" in c]
    if checks:
        mism = [c for c in checks if c.get("rows_server") != c.get("rows_baseline") or c.get("equal") is False]
        lines += ["", f"Consistency: after each step the server's and the baseline's tables were compared "
                  f"({'row counts and full contents' if res['scale'] <= 0.05 else 'row counts'}): "
                  + ("all equal." if not mism else "MISMATCH in " + ", ".join(
                      f"{c['workload']} ({c.get('rows_server')} vs {c.get('rows_baseline')} {c.get('compare_note', '')})"
                      for c in mism))]
        if res["failures"]:
            lines[-1] += (" Steps where the server failed were not compared; after a failed server upsert the two "
                          "growth tables differ by that upsert's new keys.")
    if png is not None:
        lines += ["", "## Growth", "",
                  "The incremental upsert (100k rows, half new keys, existing keys drawn uniformly from the whole "
                  "table) repeated as the table grows to 1M, 3M and 10M rows (built by appending 1M-row batches "
                  "through the server; see the setup steps). Each growth upsert runs on a freshly started server "
                  "(same warehouse), so its peak RSS is what that upsert needs at that table size; what a "
                  "long-running server accumulates is the 'RSS before' column of the setup steps. If a server append "
                  "fails (for example killed at the RSS safety cap), the rest of the table is appended with delta-rs "
                  "directly (marked `[delta-rs direct]`) so the upsert can still be measured.", "",
                  f"![growth]({png.name})", ""]
    lines += ["## Machine", "",
              f"- {m['nproc']} CPUs ({m['cpu']}), {m['memory_gb']} GB RAM, Linux {m['kernel']}",
              f"- Python {m['python']}, pyspark-client {v.get('pyspark-client')}, pysail {v.get('pysail')}, "
              f"deltalake {v.get('deltalake')}, pyarrow {v.get('pyarrow')}, grpcio {v.get('grpcio')}, "
              f"zstandard {v.get('zstandard')}, cryptography {v.get('cryptography')}, numpy {v.get('numpy')}",
              f"- load average at start {m['loadavg_start']}, at end {res['loadavg_end']}; per-workload 1-min load "
              f"before each step is in bench-results.json. Other test suites may share this 2-core machine, so "
              f"single numbers are noisy (expect +-20%); ratios are measured back to back.",
              f"- code: git {m.get('git', {}).get('head', '?')}"
              + (f" plus uncommitted changes in {', '.join(m['git']['server_changes'])}"
                 if m.get("git", {}).get("server_changes") else ""),
              f"- server start-up (process + embedded Sail, to SERVING): {res['server_startup_s']:.1f} s; idle "
              f"RSS {_gb(res['server_idle_rss'])}", ""]
    lines += ["## How to run", "", "```sh", "make bench                                   # = .venv/bin/python scripts/bench.py",
              ".venv/bin/python scripts/bench.py --scale 0.01   # quick check (reports to bench-data/report/)",
              ".venv/bin/python scripts/bench.py --only upsert  # one workload (+ what it needs first)",
              ".venv/bin/python scripts/bench.py --skip-growth --no-profile",
              ".venv/bin/python scripts/bench.py --only growth --rss-cap-gb 14 --out /tmp/g  # a higher safety cap",
              ".venv/bin/python scripts/bench.py --report-only docs/bench-results.json   # re-render this page",
              "```", "",
              f"The server and the baseline worker are killed (and the step recorded as failed) above "
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
              "- growth: a second wide table: the 1M initial load, the upsert, then 1M-row appends to 3M, a "
              "fresh 100k upsert (keys drawn from 0..3M, 50k new), appends to 10M, and again.", ""]
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
                  "scripts/bench_profile_server.py, which runs pyinstrument (2 ms sampling, wall clock) inside the "
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
    full = args.scale == 1.0 and not args.only and not args.skip_growth
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
