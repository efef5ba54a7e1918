"""What a process tree holds: peak RSS sampled every 0.1 s (with a safety cap), and CPU time.

For Spark the tree is the destination's server plus the Spark Connect JVM it starts, so the
figures are what the engine costs the machine, not only the Python process; for the default
engine (auto) the JVM is in the tree only while the server keeps one (started on first need or
ahead, stopped when idle), so besides the tree's peak each process kind's own peak is kept
(`peak_by_name`: e.g. the Python process's and the JVM's, which need not peak together).
"""
from __future__ import annotations

import threading
from typing import Optional

import psutil

from .results import GB


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    """The process and all its descendants ([] once it is gone)."""
    try:
        return [proc] + proc.children(recursive=True)
    except psutil.Error:
        return []


def _exe(p: psutil.Process) -> Optional[tuple[str, tuple[str, ...]]]:
    """The executable and the command line: a fork that has not exec'd has both of its parent's."""
    try:
        return p.exe(), tuple(p.cmdline())
    except psutil.Error:
        return None


def tree_parts(proc: psutil.Process) -> list[tuple[str, int]]:
    """(name, RSS) of a process and all its descendants (for Spark: the server, the JVM and its launcher).

    A child that runs its parent's executable is a fork that has not exec'd (yet): the JVM starts
    helper commands (Hadoop's shell calls) by forking from a task thread, and for that moment the
    child reports the JVM's whole resident set, which is the parent's pages shared copy-on-write.
    Counting it would double the JVM in the sum, so such children are left out. A child that exec'd the
    same program with its own command line (a Spark worker's executor JVM) is a process of its own and counts."""
    procs = _tree(proc)
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


def tree_rss(proc: psutil.Process) -> int:
    return sum(rss for _, rss in tree_parts(proc))


def parts_text(parts: list[tuple[str, int]]) -> str:
    return " + ".join(f"{n} {rss / GB:.2f} GB" for n, rss in parts if rss >= 16 * 1024 ** 2)


def by_name(parts: list[tuple[str, int]]) -> dict[str, int]:
    """(name, value) pairs summed per process name (e.g. {"python": ..., "java": ...})."""
    out: dict[str, int] = {}
    for n, v in parts:
        out[n] = out.get(n, 0) + v
    return out


def tree_cpu_by_name(proc: psutil.Process) -> dict[str, float]:
    """User + system CPU seconds so far per process name of the tree (the JVM apart from Python)."""
    out: dict[str, float] = {}
    for p in _tree(proc):
        try:
            c = p.cpu_times()
            out[p.name()] = out.get(p.name(), 0.0) + c.user + c.system
        except psutil.Error:
            pass
    return out


def tree_names(proc: psutil.Process) -> list[str]:
    """The processes counted in tree_rss (the server, and for Spark its JVM), for the report."""
    out = []
    for p in _tree(proc):
        try:
            out.append(f"{p.name()} ({p.memory_info().rss / GB:.2f} GB)")
        except psutil.Error:
            pass
    return out


def tree_cpu(proc: psutil.Process) -> float:
    """User + system CPU seconds of the process tree so far."""
    total = 0.0
    for p in _tree(proc):
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
        self.peak_by_name: dict[str, dict[str, int]] = {}  # each process name's own peak since the reset
        self.capped: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def watch(self, name: str, pid: int) -> None:
        with self._lock:
            self.procs[name] = psutil.Process(pid)
            self.peaks[name] = 0
            self.peak_by_name[name] = {}
            self.capped.pop(name, None)

    def reset(self) -> None:
        with self._lock:
            for name, p in self.procs.items():
                parts = tree_parts(p)
                self.peaks[name] = sum(r for _, r in parts)
                self.peak_parts[name] = parts_text(parts)
                self.peak_by_name[name] = by_name(parts)

    def _sample(self, name: str, p: psutil.Process) -> None:
        parts = tree_parts(p)
        rss = sum(r for _, r in parts)
        own = self.peak_by_name.setdefault(name, {})
        for n, r in by_name(parts).items():
            own[n] = max(own.get(n, 0), r)
        if rss > self.peaks.get(name, 0):
            self.peaks[name] = rss
            self.peak_parts[name] = parts_text(parts)
        if self.cap and rss > self.cap and name not in self.capped:
            self.capped[name] = rss
            # the whole tree, by pid (the Spark JVM would also die with its parent, by PR_SET_PDEATHSIG)
            for q in _tree(p) or [p]:
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

    def own_peaks(self, name: str) -> dict[str, int]:
        """Each process name's own peak RSS in the tree `name` since the last reset."""
        with self._lock:
            return dict(self.peak_by_name.get(name, {}))

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                for name, p in self.procs.items():
                    self._sample(name, p)

    def stop(self) -> None:
        self._stop.set()
