"""`make cluster`: a supervisor process owns the cluster (`serve`) until it is stopped; `start`,
`stop` and `status` find it through the state directory (its `pids` and `env` files)."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from .cluster import LocalCluster
from .config import ROOT, SECRET_KEYS, SUPERVISOR_LOG, ClusterOptions, write_private
from .processes import group_alive, processes_mentioning, running, stop_group


def read_pids(state_dir: Path) -> dict[str, int]:
    try:
        lines = (state_dir / "pids").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        name, _, pid = line.partition(" ")
        if pid.strip().isdigit():
            out[name] = int(pid)
    return out


def running_pids(state_dir: Path) -> dict[str, int]:
    """The recorded processes still alive (and still this cluster's: PIDs get reused)."""
    out = {}
    for name, pid in read_pids(state_dir).items():
        if not running(pid):
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(state_dir) in cmd or name == "s3" and "weed" in cmd:
            out[name] = pid
    return out


def read_env(state_dir: Path) -> dict[str, str]:
    out = {}
    try:
        lines = (state_dir / "env").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        key, _, value = line.partition("=")
        if key:
            out[key] = (shlex.split(value) or [""])[0]
    return out


def describe(env: dict[str, str]) -> str:
    return "\n".join(f"{k}={'<hidden>' if k in SECRET_KEYS else v}" for k, v in env.items())


def serve(state_dir: Path, options: ClusterOptions) -> int:
    """The supervisor: owns the cluster until SIGTERM/SIGINT, then stops it in order."""
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stopping.append(True))
    cluster = LocalCluster(state_dir, options)
    try:
        cluster.start()
    except BaseException as exc:  # noqa: BLE001 - reported through the state directory
        with contextlib.suppress(OSError):
            write_private(state_dir / "failed", f"{type(exc).__name__}: {exc}\n")
        return 1
    pids = {"supervisor": os.getpid(), **cluster.pids()}
    write_private(state_dir / "pids", "".join(f"{n} {p}\n" for n, p in pids.items()))
    write_private(state_dir / "ready", "")
    while not stopping:
        dead = [n for n, p in cluster.parts.items() if not p.alive()]
        if dead:
            print(f"cluster part(s) exited: {', '.join(dead)}; stopping the rest", flush=True)
            break
        time.sleep(1)
    cluster.stop()
    return 0


def cmd_start(state_dir: Path, options: ClusterOptions) -> int:
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = os.open(state_dir, os.O_RDONLY)
    try:
        # One `start` at a time: a second waits, then finds the first one's cluster running.
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _start_locked(state_dir, options)
    finally:
        os.close(lock)


def _start_locked(state_dir: Path, options: ClusterOptions) -> int:
    running = running_pids(state_dir)
    if running:
        print(f"a cluster is already running from {state_dir} "
              f"(pids {', '.join(f'{n}={p}' for n, p in running.items())}); `make cluster-stop` stops it", flush=True)
        print(describe(read_env(state_dir)))
        return 0
    for name in ("ready", "failed", "pids", "env", SUPERVISOR_LOG):
        (state_dir / name).unlink(missing_ok=True)
    began = time.monotonic()
    argv = [sys.executable, "-m", "tools.local_cluster", "serve", "--state-dir", str(state_dir), "--storage", options.storage]
    with open(state_dir / SUPERVISOR_LOG, "ab") as log:
        sup = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    print(f"starting the cluster in {state_dir} (supervisor pid {sup.pid}; logs in {state_dir / 'logs'})", flush=True)
    while not (state_dir / "ready").exists():
        failed = state_dir / "failed"
        if failed.exists() or sup.poll() is not None:
            time.sleep(0.5)
            reason = failed.read_text().strip() if failed.exists() else f"the supervisor exited with code {sup.poll()}"
            print(f"the cluster did not start: {reason}", file=sys.stderr)
            cmd_stop(state_dir, quiet=True)
            return 1
        time.sleep(0.5)
    timings = json.loads((state_dir / "timings.json").read_text())
    print(f"cluster ready in {time.monotonic() - began:.1f}s ("
          + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items() if k != "cluster") + ")")
    print(describe(read_env(state_dir)))
    print(f"values, secret included, in {state_dir / 'env'} (owner only): set -a; . {state_dir / 'env'}; set +a")
    return 0


def cmd_stop(state_dir: Path, quiet: bool = False) -> int:
    pids = read_pids(state_dir)
    sup = pids.pop("supervisor", None)
    if sup is not None and running(sup):
        # The supervisor stops the parts in order; give it their grace periods.
        stop_group(sup, 60.0)
    for name, pid in reversed(list(pids.items())):
        if running(pid) or group_alive(pid):
            stop_group(pid, 10.0)
    for pid in processes_mentioning(state_dir):
        stop_group(pid, 5.0)
    left = [pid for pid in [*pids.values(), *([sup] if sup else [])] if running(pid)] + processes_mentioning(state_dir)
    for name in ("env", "pids", "ready"):
        (state_dir / name).unlink(missing_ok=True)
    if left:
        print(f"still running after KILL: pids {sorted(set(left))}", file=sys.stderr)
        return 1
    if not quiet:
        print(f"cluster stopped ({len(pids) + (1 if sup else 0)} processes)" if pids or sup else "no cluster was running")
    return 0


def cmd_status(state_dir: Path) -> int:
    running = running_pids(state_dir)
    if not running:
        print("no cluster is running")
        return 1
    print("running: " + ", ".join(f"{n}={p}" for n, p in running.items()))
    print(describe(read_env(state_dir)))
    return 0
