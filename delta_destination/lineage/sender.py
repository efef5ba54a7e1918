"""A bounded queue drained by one background thread: how lineage leaves the write path.

A write only ever pays for `submit` (a non-blocking put). When the endpoint is down or
slow the queue fills and new items are dropped -- lineage is best effort, a write never
waits for it. Failures become WARNING lines (rate-limited, exception class only: messages
of HTTP libraries can carry URLs with credentials).
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Generic, TypeVar

from .. import logs

log = logs.get(__name__)

T = TypeVar("T")
WARN_EVERY_SECONDS = 60.0
_STOP = object()


class BackgroundSender(Generic[T]):
    def __init__(self, what: str, send: Callable[[T], None], capacity: int = 1000):
        self.what = what
        self._send = send
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, capacity))
        self.sent = 0
        self.failed = 0
        self.dropped = 0
        self._last_warning = 0.0
        self._thread = threading.Thread(target=self._run, name=f"lineage-{what}", daemon=True)
        self._thread.start()

    def submit(self, item: T) -> bool:
        """Never blocks: False (and a warning) when the queue is full."""
        try:
            self._queue.put_nowait(item)
            return True
        except queue.Full:
            self.dropped += 1
            self._warn(f"{self.what}: the queue is full (endpoint slow or down); "
                       f"{self.dropped} item(s) dropped so far; writes are unaffected")
            return False

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                self._send(item)
                self.sent += 1
            except Exception as exc:  # noqa: BLE001 - lineage is best effort
                self.failed += 1
                self._warn(f"{self.what}: sending failed ({type(exc).__name__}); "
                           f"{self.failed} failure(s) so far; writes are unaffected")
            finally:
                self._queue.task_done()

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= WARN_EVERY_SECONDS or self._last_warning == 0.0:
            self._last_warning = now
            log.warning(message)

    def flush(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the queue to drain (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def close(self, timeout: float = 5.0) -> bool:
        """Send what is queued (up to `timeout`), then stop the thread."""
        drained = self.flush(timeout)
        try:
            self._queue.put_nowait(_STOP)
        except queue.Full:
            return False
        self._thread.join(max(0.0, timeout if drained else 0.0))
        return drained
