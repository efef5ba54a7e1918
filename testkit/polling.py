"""A background poll for the length of a `with` block: what tests use to watch a running
request from outside (memory of process trees, objects on a bucket, files on disk)."""
from __future__ import annotations

import threading


class Poller:
    """Calls `poll()` every `interval` seconds on a daemon thread between `__enter__` and
    `__exit__`; subclasses keep what they saw in their own fields."""

    def __init__(self, interval: float):
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def poll(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
