"""Processes as the tests and the benchmark look at them: whether one still runs or in which state it
is, the processes below one (a process tree, its Spark JVMs, its Sail engines), the memory of a
process tree (PSS by role) and the peak of a cluster's process trees.

The process-group and process-tree helpers the local cluster tool needs live with the tool
(tools/local_cluster/processes.py, which cannot import the test kit); they are
re-exported here, so that tests take every process helper from this one module."""
from __future__ import annotations

import time

import psutil

from tools.local_cluster.processes import (process_tree, processes_mentioning, running, stop_group,
                                                             tree_rss)
from testkit.polling import Poller

__all__ = ["PeakMemory", "jvms_below", "process_state", "process_tree", "processes_mentioning", "role", "running",
           "sail_engines_below", "spark_jvms_below", "stop_group", "tree_pss", "tree_rss", "wait_state"]


def process_state(pid: int) -> str:
    """'gone', or psutil's status ('stopped', 'running', 'sleeping', ...); a zombie is gone."""
    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return "gone"
    return "gone" if status == psutil.STATUS_ZOMBIE else status


def wait_state(pid: int, want: str, timeout: float) -> float:
    """Seconds until the process is in state `want`; AssertionError after `timeout`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if process_state(pid) == want:
            return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError(f"process {pid} is {process_state(pid)!r}, not {want!r}, after {timeout}s")


def jvms_below(root_pid: int, main_class: str) -> list:
    """The Spark JVMs running `main_class` below a process (psutil.Process objects). Processes
    that end while we look are skipped, and so is spark-class's launcher step: a short java
    (org.apache.spark.launcher.Main) run with the same arguments to build the real command."""
    out = []
    for p in process_tree(root_pid)[1:]:
        try:
            cmdline = " ".join(p.cmdline())
        except psutil.Error:  # a launcher step that already exited (zombie or gone)
            continue
        if main_class in cmdline and "org.apache.spark.launcher.Main" not in cmdline:
            out.append(p)
    return out


def spark_jvms_below(root_pid: int) -> list:
    """The Spark Connect JVMs below a process (e.g. make -> destination -> spark-submit's java, or a
    destination's on-demand engine)."""
    return jvms_below(root_pid, "SparkConnectServer")


def sail_engines_below(root_pid: int) -> list:
    """The Sail engine processes (engines/sail_engine.py) below a process, skipping any that end
    while we look."""
    out = []
    for p in process_tree(root_pid)[1:]:
        try:
            cmdline = p.cmdline()
        except psutil.Error:
            continue
        if any(part.endswith("sail_engine") or part == "sail-engine" for part in cmdline):
            out.append(p)
    return out


def role(p: psutil.Process) -> str:
    """What a process of a destination's tree is: the Sail engine, a Spark JVM, or the door."""
    try:
        cmdline = " ".join(p.cmdline())
    except psutil.Error:
        return "gone"
    if "sail_engine" in cmdline or " sail-engine" in cmdline:
        return "engine"
    if "java" in p.name():
        return "jvm"
    if p.name() in ("make", "sh", "bash"):
        return "shell"
    return "door"


def tree_pss(root: psutil.Process) -> dict[str, int]:
    """PSS bytes of `root` and its descendants, summed per role (processes that end are skipped)."""
    try:
        procs = [root] + root.children(recursive=True)
    except psutil.Error:
        return {}
    out: dict[str, int] = {}
    for p in procs:
        try:
            pss = p.memory_full_info().pss
        except psutil.Error:
            continue
        r = role(p)
        out[r] = out.get(r, 0) + pss
    return out


class PeakMemory(Poller):
    """Samples the summed RSS of a cluster's process trees (`cluster.pids()`) every half second."""

    def __init__(self, cluster):
        super().__init__(0.5)
        self.cluster = cluster
        self.peak = 0
        self.peak_parts: dict[str, int] = {}

    def poll(self):
        parts = {name: tree_rss(pid) for name, pid in self.cluster.pids().items()}
        total = sum(parts.values())
        if total > self.peak:
            self.peak, self.peak_parts = total, parts
