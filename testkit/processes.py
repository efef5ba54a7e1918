"""Processes as the tests and the benchmark look at them: whether one still runs, the processes
below one (its JVMs, its Sail engines), the memory of a process tree.

The process-group and state-directory helpers the local cluster tool needs live with the tool
(delta_destination/tools/local_cluster/processes.py, which cannot import the test kit); they are
re-exported here so that tests take every process helper from this one module."""
from __future__ import annotations

from delta_destination.tools.local_cluster.processes import processes_mentioning, running, stop_group, tree_rss

from testkit.polling import Poller

__all__ = ["PeakMemory", "processes_mentioning", "running", "stop_group", "tree_rss"]


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
