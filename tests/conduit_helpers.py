"""Shared by the Conduit tests: the engine under test (ONE place), replaying a stream the way
the destination must apply it, and reading the Delta table back with delta-rs."""
from __future__ import annotations

import os
from pathlib import Path

from testkit.delta_read import read_delta_table

# The lead parametrizes across engines with DELTA_TEST_ENGINES (comma list); the first one is used here.
ENGINE = (os.environ.get("DELTA_TEST_ENGINES", "sail").split(",")[0].strip() or "sail")


def connector_config(warehouse: Path, **extra) -> dict:
    cfg = {"warehouse": str(warehouse), "engine": ENGINE}
    if os.environ.get("DELTA_TEST_SPARK_REMOTE"):
        cfg["spark.remote"] = os.environ["DELTA_TEST_SPARK_REMOTE"]
    cfg.update({k: str(v) for k, v in extra.items()})
    return cfg


def replay(events) -> dict:
    """events: (op, key_tuple, row or None) in stream order -> {key: row}. Upserts replace the
    named fields (others keep their value), deletes remove the key."""
    state: dict = {}
    for op, key, row in events:
        if op == "delete":
            state.pop(key, None)
        else:
            state[key] = {**state.get(key, {}), **row}
    return state


def table_rows(path: Path, key_columns) -> dict:
    t = read_delta_table(str(path))
    out = {}
    for row in t.to_pylist():
        out[tuple(row[k] for k in key_columns)] = row
    return out


# ---- host processes (testkit/conduit_host.py run as a program) -----------------------------------
import json as _json
import signal as _signal
import subprocess as _subprocess
import sys as _sys
import time as _time

ROOT = Path(__file__).resolve().parents[1]


class HostProcess:
    """A Conduit stand-in as a process of its own, the plugin's parent: kill -9 it and the
    plugin is an orphan, as after a kill -9 of Conduit."""

    def __init__(self, work: Path, name: str, config: dict, first: int, count: int, keys: int,
                 env: dict | None = None, finish: bool = False):
        self.status_path = work / f"{name}.json"
        self.status_path.unlink(missing_ok=True)
        args = [_sys.executable, "-m", "testkit.conduit_host", "--work", str(work), "--name", name,
                "--config", _json.dumps(config), "--first", str(first), "--count", str(count), "--keys", str(keys)]
        for k, v in (env or {}).items():
            args += ["--env", f"{k}={v}"]
        if finish:
            args.append("--finish")
        self._log = open(work / f"{name}-host.log", "ab")
        self.proc = _subprocess.Popen(args, cwd=ROOT, stdout=self._log, stderr=_subprocess.STDOUT)
        self.plugin_pid = self.wait_for(lambda s: True, timeout=120)["plugin_pid"]

    def status(self) -> dict:
        try:
            return _json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return {}

    def wait_for(self, predicate, timeout: float = 180.0) -> dict:
        deadline = _time.monotonic() + timeout
        while _time.monotonic() < deadline:
            s = self.status()
            if s and predicate(s):
                return s
            if self.proc.poll() is not None and not (s and predicate(s)):
                raise AssertionError(f"host exited ({self.proc.returncode}) before the condition: {s}")
            _time.sleep(0.05)
        raise AssertionError(f"timeout waiting for the host: {self.status()}")

    def kill9(self) -> float:
        """kill -9 of the host; returns the wall-clock time (s) at which it was dead."""
        self.proc.send_signal(_signal.SIGKILL)
        self.proc.wait()
        return _time.time()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def process_state(pid: int) -> str:
    """'gone', or psutil's status ('stopped', 'running', 'sleeping', ...); a zombie is gone."""
    import psutil

    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return "gone"
    return "gone" if status == psutil.STATUS_ZOMBIE else status


def wait_state(pid: int, want: str, timeout: float) -> float:
    """Seconds until the process is in state `want`; AssertionError after `timeout`."""
    start = _time.monotonic()
    while _time.monotonic() - start < timeout:
        if process_state(pid) == want:
            return _time.monotonic() - start
        _time.sleep(0.02)
    raise AssertionError(f"process {pid} is {process_state(pid)!r}, not {want!r}, after {timeout}s")


def commit_history(path: Path) -> list[dict]:
    """(version, timestamp ms, operation) of every commit, read with delta-rs."""
    from deltalake import DeltaTable

    return sorted(({"version": h["version"], "timestamp": h["timestamp"], "operation": h.get("operation")}
                   for h in DeltaTable(str(path)).history()), key=lambda h: h["version"])


def numbered_replay(first: int, last: int, keys: int) -> dict:
    """What testkit.conduit_host.numbered_records first..last leave: key k holds the last i."""
    return {(i % keys,): i for i in range(max(first, last - keys + 1), last + 1)}


# ---- a backlog -------------------------------------------------------------------------------------
def backlog_records(total: int, table: str = "backlog"):
    """`total` new keys, ~300 bytes each on the wire, the way a snapshot backlog arrives."""
    from testkit.conduit_host import CREATE, record

    note = "x" * 120
    for i in range(1, total + 1):
        yield record(i, CREATE, key={"id": i}, metadata={"opencdc.collection": table},
                     after={"id": i, "name": f"user{i}", "email": f"user{i}@example.com", "score": i / 7,
                            "active": i % 2 == 0, "note": note})
