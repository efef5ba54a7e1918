"""The processes of a benchmark run and its measured steps: a server per engine
(testkit/server_process.RunningServer, each on its own warehouse), the baseline worker, the RSS
sampler, and `Bench.step`, which runs one workload step on every engine in turn and then once on the
baseline.

Engine `auto` is the destination's default: its server is started without an `--engine` flag, as a
user who names no engine starts it, and each request runs on embedded Sail or on a local Spark JVM
the server starts when needed. Which engine served a step is read from the server's log: each
write's line ends with `, engine sail (<reason>)` or `, engine spark (<reason>)`."""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from pathlib import Path
from typing import Callable, Optional

import psutil

from ..common.baseline import BaselineProc
from .results import GB, gb, short
from ..common.rpc import SCHEMA, RpcFailed
from .sampling import Sampler, tree_cpu, tree_cpu_by_name, tree_names, tree_rss
from testkit.server_process import RunningServer

SERVER_READY_TIMEOUT = 300.0
AUTO = "auto"  # the default engine: its server gets no --engine flag
_SERVED = re.compile(r", engine (sail|spark) \((.*)\)$")
# the server's lines about the local Spark engine auto starts and stops (session.py, spark_process.py)
_JVM_NOTE = re.compile(r"local Apache Spark engine|local Spark engine")
_JVM_SECONDS = re.compile(r"(?:engine started|was warmed up) in ([0-9.]+)s")


def engine_flag(engine: str) -> str | None:
    """The `--engine` value a server for `engine` is started with (None for the default, auto)."""
    return None if engine == AUTO else engine


def served_by(log_text: str) -> dict:
    """Which engine served the writes logged in `log_text` (a step's part of a server log) and why,
    and what the server said about the local Spark engine meanwhile (started, ahead, stopped)."""
    engines, reasons, notes = [], [], []
    for line in log_text.splitlines():
        try:
            msg = json.loads(line).get("message", "")
        except (ValueError, AttributeError):
            continue
        m = _SERVED.search(msg)
        if m:
            engines.append(m.group(1))
            reasons.append(m.group(2))
        elif _JVM_NOTE.search(msg):
            notes.append(msg[:300])
    out: dict = {"served_by": engines, "served_reasons": list(dict.fromkeys(reasons))}
    if notes:
        out["jvm_notes"] = notes
        # the JVM's start and warm-up during the step (a part of the step's time when a request waited for it)
        out["jvm_start_s"] = round(sum(float(x) for n in notes for x in _JVM_SECONDS.findall(n)), 1)
    return out


def _log_size(path: Path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""
# the figures a step prints as it ends
_PRINTED = ("server_s", "server_outcome", "served_by", "jvm_start_s", "baseline_s", "ratio", "rows_per_s", "server_peak_rss",
            "server_peak_by_process", "baseline_peak_rss", "server_cpu_s", "rows_server", "rows_baseline", "equal")


def _printed(key: str, v) -> str:
    if key == "server_peak_by_process":
        return "+".join(f"{n}:{gb(b)}" for n, b in v.items() if b >= 16 * 2**20)
    if key == "served_by":
        return ",".join(v) or "-"
    return short(v)


class Bench:
    """The processes of a run, and its measured steps with their figures."""

    def __init__(self, args, tmp: Path):
        self.args = args
        self.engines: list[str] = args.engines
        self.tmp = tmp
        self.warehouses = {e: tmp / f"warehouse-{e}" for e in self.engines}  # or an s3:// URL
        self.server_env: Optional[dict] = None  # added to the servers' environment (e.g. S3Server.env())
        self.server_args: tuple[str, ...] = ()   # added to the servers' flags (e.g. --spark-remote of a cluster)
        self.bl_root = tmp / "baseline"
        self.bl_root.mkdir()
        self.results: list[dict] = []   # reported workloads, one row per engine
        self.setup: list[dict] = []     # setup steps (growth appends, history load), one row per engine
        self.failures: list[str] = []
        self.checks: list[dict] = []
        self.events: list[str] = []
        self.restarts = 0
        self.servers: dict[str, RunningServer] = {}
        self.engine = self.engines[0]   # the engine the current server call goes to
        self.startup: dict[str, list[float]] = {e: [] for e in self.engines}
        self.t0 = time.monotonic()

    def log(self, msg: str) -> None:
        """A progress line: UTC time and minutes since the start of the run."""
        now = dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S")
        print(f"[{now} +{(time.monotonic() - self.t0) / 60:5.1f}m] {msg}", flush=True)

    # ---- one measured step -----------------------------------------------------------------
    def step(self, name: str, *, rows: int, specs=(), server_fn: Callable[[], None],
             baseline_fn: Optional[Callable[[], dict]], table_size: Optional[int] = None, setup=False,
             table: Optional[str] = None, engines: Optional[list[str]] = None, extra: Optional[dict] = None
             ) -> dict[str, dict]:
        """One workload step: server_fn on each engine's server in turn (self.engine says which), then
        baseline_fn ONCE; the baseline's figures are copied into each engine's row. Returns engine -> row."""
        in_bytes = sum(s.bytes for s in specs)
        base = {"workload": name, "rows": rows, "files": len(specs), "input_bytes": in_bytes, "table_size": table_size,
                **(extra or {})}
        self.log(f"{name}: {rows:,} rows, {len(specs)} files, {in_bytes / 1e6:.1f} MB")
        out: dict[str, dict] = {}
        for e in engines or self.engines:
            self.engine = e
            out[e] = {**base, "engine": e, "loadavg_before": round(os.getloadavg()[0], 2)}
            self._server_part(out[e], name, server_fn)
        baseline = self._baseline_part(name, baseline_fn) if baseline_fn is not None else {}
        for e, r in out.items():
            self.engine = e
            self._finish_row(r, baseline, rows, in_bytes, table)
            (self.setup if setup else self.results).append(r)
        self._save_progress()
        return out

    def _save_progress(self) -> None:
        """The steps so far, beside the run's folder (bench-data/partial-results.json, overwritten by each
        run): what an interrupted run measured."""
        try:
            (self.tmp.parent / "partial-results.json").write_text(json.dumps(
                {"engines": self.engines, "scale": self.args.scale, "results": self.results, "setup": self.setup,
                 "failures": self.failures, "events": self.events}, indent=1, default=str) + "\n")
        except OSError:
            pass

    def _finish_row(self, r: dict, baseline: dict, rows: int, in_bytes: int, table: Optional[str]) -> None:
        r.update(baseline)
        if r.get("server_s") and r.get("baseline_s"):
            r["ratio"] = r["server_s"] / r["baseline_s"]
        if r.get("server_s"):
            r["rows_per_s"] = rows / r["server_s"]
            r["mb_per_s"] = in_bytes / 1e6 / r["server_s"] if in_bytes else None
        if table and r.get("server_s") is not None:
            r.update(self.verify(table))
        print(f"    {self.engine}: " + ", ".join(f"{k}={_printed(k, v)}" for k, v in r.items() if k in _PRINTED),
              flush=True)

    def _server_part(self, r: dict, name: str, server_fn: Callable[[], None]) -> None:
        key = f"server:{self.engine}"
        srv = psutil.Process(self.server.proc.pid)
        log_path, log_at = self.server.log_path, _log_size(self.server.log_path)
        self.sampler.reset()
        r["server_rss_before"] = self.sampler.peak(key)
        r["server_rss_before_by_process"] = self.sampler.own_peaks(key)
        cpu0, cpu0_by = tree_cpu(srv), tree_cpu_by_name(srv)
        t = time.perf_counter()
        try:
            server_fn()
            r["server_s"] = time.perf_counter() - t
            r["server_outcome"] = "ok"
        except Exception as exc:  # noqa: BLE001
            self._server_failed(r, name, exc, time.perf_counter() - t)
        r["server_cpu_s"] = tree_cpu(srv) - cpu0 if self.server_alive() else None
        if self.server_alive():  # a JVM that stopped during the step is missing here (its CPU is lost)
            r["server_cpu_by_process"] = {n: round(c - cpu0_by.get(n, 0.0), 2)
                                          for n, c in tree_cpu_by_name(srv).items()}
        r["server_peak_rss"] = self.sampler.peak(key)
        r["server_peak_parts"] = self.sampler.peak_parts.get(key)
        r["server_peak_by_process"] = self.sampler.own_peaks(key)
        r.update(served_by(_read_from(log_path, log_at)))
        if not self.server_alive():
            self.restart_server(f"after the failure of {name}")

    def _server_failed(self, r: dict, name: str, exc: Exception, took: float) -> None:
        """Why the step failed: killed at the RSS cap, refused by the memory guard, died, or failed."""
        r.update(server_s=None, server_failed_after_s=took, server_error=str(exc)[:2000])
        time.sleep(0.3)
        capped = self.sampler.capped.get(f"server:{self.engine}")
        if capped:
            r["server_outcome"] = "killed"
            r["server_error"] = (f"killed by the benchmark after {took:.0f} s: server process tree RSS reached "
                                 f"{capped / GB:.1f} GB, over the {self.args.rss_cap_gb:g} GB safety cap "
                                 f"| {r['server_error'][:300]}")
        elif isinstance(exc, RpcFailed) and exc.code == "RESOURCE_EXHAUSTED":
            r["server_outcome"] = "refused"
            r["server_error"] = "refused by the memory guard (gRPC RESOURCE_EXHAUSTED) | " + r["server_error"]
        elif not self.server_alive():
            r["server_outcome"] = "died"
            r["server_error"] += " | server process died: " + self.server.log_text()[-1500:]
        else:
            r["server_outcome"] = "failed"
        self.failures.append(f"{name} [{self.engine}]: {r['server_error']}")
        self.log(f"    {self.engine}: SERVER {r['server_outcome'].upper()} after {took:.1f}s: {r['server_error'][:500]}")

    def _baseline_part(self, name: str, baseline_fn: Callable[[], dict]) -> dict:
        r: dict = {}
        self.sampler.reset()
        try:
            res = baseline_fn()
            r.update(baseline_s=res["seconds"], baseline_read_s=res.get("read_s"), baseline_write_s=res.get("write_s"))
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

    # ---- the processes -----------------------------------------------------------------------
    @property
    def server(self) -> RunningServer:
        return self.servers[self.engine]

    @property
    def stub(self):
        return self.server.stub  # looked up per call: the server may have been restarted

    def server_alive(self) -> bool:
        return self.server.proc.poll() is None

    def start_server(self, engine: str, why: str) -> None:
        """A (new) server process for `engine` on that engine's warehouse (its tables stay)."""
        old = self.servers.get(engine)
        if old is not None:
            old.stop()
        t = time.monotonic()
        self.restarts += 1
        srv = RunningServer(self.warehouses[engine], self.tmp / f"server-{engine}-{self.restarts}.log",
                            self.server_args, engine=engine_flag(engine), ready_timeout=SERVER_READY_TIMEOUT,
                            env=self.server_env)
        took = time.monotonic() - t
        self.servers[engine] = srv
        self._wait_for_warm_up(srv, engine)
        self.startup[engine].append(took)
        self.sampler.watch(f"server:{engine}", srv.proc.pid)
        self.events.append(f"{engine}: server started {why} ({took:.1f} s to SERVING)")
        self.log(f"  {engine}: server started {why} ({took:.1f} s to SERVING)")

    def _wait_for_warm_up(self, srv: RunningServer, engine: str, timeout: float = 300.0) -> None:
        """A server on the local Spark engine warms its JVM up in the background after start-up
        (engines/session.warm_up): the steps are measured after it, not beside it."""
        if engine_flag(engine) != "spark" or "--spark-remote" in self.server_args:
            return
        t = time.monotonic()
        while time.monotonic() - t < timeout and srv.proc.poll() is None:
            text = srv.log_text()
            if "was warmed up in" in text or "warm-up did not finish" in text:
                self.log(f"  {engine}: waited {time.monotonic() - t:.1f} s for the engine's warm-up")
                return
            time.sleep(0.5)

    def restart_server(self, why: str) -> None:
        self.start_server(self.engine, why)

    def restart_baseline(self, why: str) -> None:
        self.bl.stop()
        self.bl = BaselineProc()
        self.sampler.watch("baseline", self.bl.pid)
        self.events.append(f"baseline worker restarted {why}")

    # ---- the tables --------------------------------------------------------------------------
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

    # ---- start and stop -------------------------------------------------------------------------
    def start(self) -> tuple[dict, dict]:
        """The sampler, the baseline worker and a server per engine; each engine's idle RSS and tree."""
        self.sampler = Sampler(cap=int(self.args.rss_cap_gb * GB))
        self.sampler.start()
        self.bl = BaselineProc()
        self.sampler.watch("baseline", self.bl.pid)
        idle_rss, tree = {}, {}
        for e in self.engines:
            self.start_server(e, f"(warehouse {self.warehouses[e]})")
            time.sleep(1.0)  # let the engine settle before the idle figures
            proc = psutil.Process(self.servers[e].proc.pid)
            idle_rss[e], tree[e] = tree_rss(proc), tree_names(proc)
            self.log(f"  {e}: idle process tree {gb(idle_rss[e])}: {', '.join(tree[e])}")
        return idle_rss, tree

    def stop(self) -> str:
        """Every process of the run stopped; the servers' logs."""
        for srv in self.servers.values():
            srv.stop()
        self.bl.stop()
        self.sampler.stop()
        return "\n".join((self.tmp / n).read_text(errors="replace")
                         for n in sorted(os.listdir(self.tmp)) if n.startswith("server"))
