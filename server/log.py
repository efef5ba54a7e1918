"""Fivetran-format JSON log lines on stdout.

One object per line: {"level": INFO|WARNING|SEVERE, "message": ..., "message-origin": "sdk_destination"}.
Callers pass only names, counts and timings — never keys, credentials or values.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from contextlib import contextmanager

_lock = threading.Lock()
SLOW_SECONDS = 2.0


def _emit(level: str, message: str) -> None:
    line = json.dumps({"level": level, "message": message, "message-origin": "sdk_destination"})
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def info(message: str) -> None:
    _emit("INFO", message)


def warning(message: str) -> None:
    _emit("WARNING", message)


def severe(message: str) -> None:
    _emit("SEVERE", message)


@contextmanager
def timed(action: str, slow_after: float = SLOW_SECONDS):
    """Log `action` with its duration when it is slow (or always at the end of a long call)."""
    start = time.monotonic()
    yield
    elapsed = time.monotonic() - start
    if elapsed >= slow_after:
        info(f"{action} took {elapsed:.1f}s")
