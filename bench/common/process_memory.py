"""The memory a process tree holds, over time: PSS (proportional set size), so that pages shared
between the destination and its engine processes count once, split by role."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import psutil

from testkit.processes import tree_pss

MIB = 2**20


@dataclass
class Sample:
    seconds: float        # since the sampler started
    progress: int         # the run's own count (requests answered, states echoed, records acked)
    pss: dict[str, int]   # role -> bytes

    @property
    def total(self) -> int:
        return sum(self.pss.values())


@dataclass
class MemorySampler:
    """Samples `root`'s tree every `period` seconds on a thread of its own; `progress()` says how
    far the run is at each sample. `find`, when given, names the root again once it has ended: Conduit
    starts a connector process for the plugin's specifications and ends it before it starts the one
    that runs the pipeline, so the first pid found was a process that no longer existed at the first
    sample (the Conduit soaks of 2026-11-28 finished with no sample at all)."""

    root: psutil.Process
    progress: Callable[[], int]
    period: float = 5.0
    samples: list[Sample] = field(default_factory=list)
    find: Optional[Callable[[], psutil.Process]] = None

    def __post_init__(self):
        self._stop = threading.Event()
        self._began = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

    def start(self) -> "MemorySampler":
        self._thread.start()
        return self

    def _current_root(self) -> psutil.Process:
        if self.find is not None and not self.root.is_running():
            self.root = self.find()
        return self.root

    def sample(self) -> Sample:
        s = Sample(round(time.monotonic() - self._began, 1), self.progress(), tree_pss(self._current_root()))
        self.samples.append(s)
        return s

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - one failed sample (a progress file mid-write, a process
                continue       # that just ended) must not end the series: the Conduit soak lost all of them

    def stop(self) -> list[Sample]:
        self._stop.set()
        self._thread.join()
        self.sample()
        self.samples = [s for s in self.samples if s.pss]   # none of a process that had ended
        return self.samples

    def at_progress(self, n: int) -> Sample:
        """The first sample taken once the run had reached `n` (the last one if it never did)."""
        return next((s for s in self.samples if s.progress >= n), self.samples[-1])

    def peak(self) -> Sample:
        return max(self.samples, key=lambda s: s.total)
