"""Logging: every module logs through the standard `logging` package; each door decides
where lines go and in which format (Fivetran: JSON lines on stdout; Airbyte: LOG
messages; Conduit: hclog JSON on stderr) by installing one handler on the package's
root logger, `delta_destination`.

Callers pass only names, counts and timings -- never keys, credentials or values.
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager

ROOT = "delta_destination"
SLOW_SECONDS = 2.0


def get(name: str) -> logging.Logger:
    return logging.getLogger(name)


def install(handler: logging.Handler, level: int = logging.INFO) -> logging.Logger:
    """Route the package's log lines to `handler` only (replacing any earlier one)."""
    root = logging.getLogger(ROOT)
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    return root


@contextmanager
def timed(logger: logging.Logger, action: str, slow_after: float = SLOW_SECONDS):
    """Log `action` with its duration when it was slow."""
    start = time.monotonic()
    yield
    elapsed = time.monotonic() - start
    if elapsed >= slow_after:
        logger.info(f"{action} took {elapsed:.1f}s")
