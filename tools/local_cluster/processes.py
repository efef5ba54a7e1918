"""The processes of a local cluster: whether one still runs, process groups (each part of the
cluster leads one: a worker's executors are in its group), the JVMs of a state directory, the memory
of a process tree. The test kit uses the same helpers (testkit/processes.py)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional

from delta_destination.processes import pid_alive


def running(pid: int) -> bool:
    """Is `pid` running: it exists (pid_alive), and it is no zombie (a zombie has exited; only its
    parent's wait is missing)."""
    if not pid_alive(pid):
        return False
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return any(running(p) for p in group_members(pgid))


def group_members(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid:
                    out.append(int(d.name))
    return out


def stop_group(pid: int, grace: float, proc: Optional[subprocess.Popen] = None) -> None:
    """TERM the process group `pid` leads, KILL it after `grace` seconds; reap `proc` if ours."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        except PermissionError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc is not None:
                proc.poll()
            if not group_alive(pid):
                break
            time.sleep(0.2)
        else:
            continue
        break
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)


def processes_mentioning(path: Path) -> list[int]:
    """JVMs whose command line names `path` or something under it: this cluster's, also an
    executor whose worker is gone. Only `java` processes: a shell tailing a log there is not ours."""
    marker = str(path)
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            with contextlib.suppress(OSError, IndexError):
                argv = (d / "cmdline").read_bytes().split(b"\0")
                if Path(argv[0].decode(errors="replace")).name == "java" \
                        and marker in b" ".join(argv).decode(errors="replace") and running(int(d.name)):
                    out.append(int(d.name))
    return out


def process_tree(pid: int) -> list:
    """`pid` and all its descendants, as psutil.Process objects (psutil.NoSuchProcess when `pid` is gone)."""
    import psutil

    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and all its descendants."""
    import psutil

    try:
        procs = process_tree(pid)
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total
