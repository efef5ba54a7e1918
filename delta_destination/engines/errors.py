"""Spark Connect exceptions -> typed errors, without leaking values.

Engine messages can quote customer values (e.g. a failed cast), so only the exception
class and Spark's error condition travel to logs and clients.
"""
from __future__ import annotations

import time
from typing import Callable, TypeVar

from .. import logs
from ..errors import DestinationError, EngineError, EngineUnavailable, UnsupportedTableFeature

T = TypeVar("T")
log = logs.get(__name__)

_CONFLICT_MARKERS = ("failed to commit transaction", "concurrent", "conflict", "version already exists")


def error_class(exc: BaseException) -> str:
    """The exception class and Spark's error condition and SQLSTATE when the engine gives them,
    e.g. 'AnalysisException [DELTA_CONCURRENT_APPEND, SQLSTATE 2D521]' (never the message:
    it can quote values)."""
    parts = []
    for attr, label in (("getCondition", ""), ("getErrorClass", ""), ("getSqlState", "SQLSTATE ")):
        fn = getattr(exc, attr, None)
        if fn:
            try:
                v = fn()
            except Exception:  # noqa: BLE001
                v = None
            if v and f"{label}{v}" not in parts:
                parts.append(f"{label}{v}")
    return type(exc).__name__ + (f" [{', '.join(parts)}]" if parts else "")


# Engine refusals that are a property of the table, not a failure: said in words the user can act on.
TABLE_FEATURE_REFUSALS = {
    "DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES":
        "the table has no column mapping, and Apache Spark + Delta refuses column names with a space or any of "
        ",;{}()=, newline or tab in such a table (tables created on the Spark engine have column mapping; "
        "this one was created without it, e.g. by Sail): use plain column names, or write this table with Sail",
}


def table_feature_refusal(exc: BaseException) -> str | None:
    text = error_class(exc)
    for condition, why in TABLE_FEATURE_REFUSALS.items():
        if condition in text:
            return f"{why} [{condition}]"
    return None


def is_commit_conflict(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(m in text for m in _CONFLICT_MARKERS)


def is_unavailable(exc: BaseException) -> bool:
    import grpc

    if isinstance(exc, grpc.RpcError):
        try:
            return exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        except Exception:
            return False
    name = type(exc).__name__
    text = str(exc)
    return name == "RetriesExceeded" or "UNAVAILABLE" in text or ("Connection refused" in text)


def run_engine(action: str, fn: Callable[[], T], *, attempts: int = 5, base_delay: float = 0.2) -> T:
    """Run engine work; retry Delta commit conflicts with backoff. An unreachable engine is
    already retried by the Spark Connect client's policy (session.py), so it fails here at once."""
    for attempt in range(1, attempts + 1):
        try:
            with logs.timed(log, action):  # a slow engine step names itself in the log
                return fn()
        except DestinationError:
            raise
        except Exception as exc:  # noqa: BLE001 - classified below
            retryable = is_commit_conflict(exc) and not is_unavailable(exc)
            if retryable and attempt < attempts:
                delay = base_delay * (2 ** (attempt - 1))
                log.warning(f"{action}: transient engine problem ({error_class(exc)}), retry {attempt}/{attempts - 1} in {delay:.1f}s")
                time.sleep(delay)
                continue
            refusal = table_feature_refusal(exc)
            if refusal:
                raise UnsupportedTableFeature(f"{action}: {refusal}") from exc
            if is_unavailable(exc):
                raise EngineUnavailable(f"{action}: the engine is unavailable ({error_class(exc)}); the request can be retried") from exc
            raise EngineError(f"{action} failed in the Spark engine ({error_class(exc)})") from exc
    raise AssertionError("unreachable")
