"""What an operator watches: a Prometheus text endpoint, off unless `metrics_port` is set.

Every door counts its requests (by request kind and outcome); the core's commits give rows
by operation and a latency histogram (a listener on its events, like lineage); the engines
count which engine served what and why, and every replacement of an engine process with its
cause, the requests it served and whether it came sooner than its memory bound's rule allows (an
expected replacement is an INFO log line and a count; only an early one is a warning); the process
and its engine processes report their resident memory, and the supervised engine its bound.

No label holds a table or schema name, a key, a credential or a value: table names are
customer data (and an unbounded label set). The labels are the door, the request kind (the
door's own RPC or command names), the outcome class, the row operation, the engine and the
reason or cause codes listed below.

The metrics live in this process's own registry and cost a lock and an addition each whether
or not the endpoint is served, so the code that counts never asks whether metrics are on.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.process_collector import ProcessCollector

from . import logs
from .errors import InvalidRequest

log = logs.get(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)   # process_resident_memory_bytes etc. of this process

REQUESTS = Counter("delta_destination_requests", "Requests a door answered, by door, request kind and outcome "
                   "(success, warning, task, or the error class).", ("door", "request", "outcome"),
                   registry=REGISTRY)
ROWS = Counter("delta_destination_rows", "Rows committed, by door and operation (insert, update, delete).",
               ("door", "operation"), registry=REGISTRY)
COMMIT_SECONDS = Histogram("delta_destination_commit_seconds", "Seconds from opening a table to its commit, for "
                           "operations that committed, by door.", ("door",), registry=REGISTRY,
                           buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900))
ENGINE_CHOICES = Counter("delta_destination_engine_choices", "Table operations by the engine that served them and "
                         "the reason code of the choice.", ("engine", "reason"), registry=REGISTRY)
ENGINE_RESTARTS = Counter("delta_destination_engine_restarts", "Engine processes replaced or restarted, by engine "
                          "and cause (memory, requests: replaced between requests by the supervisor; crash: it "
                          "died; idle: stopped after idle time).", ("engine", "cause"), registry=REGISTRY)
ENGINE_PROCESS_REQUESTS = Histogram("delta_destination_engine_process_requests", "Requests each supervised engine "
                                    "process served before it was replaced or died, by engine and cause (the rate "
                                    "of replacements per request is 1 / this).", ("engine", "cause"),
                                    registry=REGISTRY, buckets=(20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 50000))
ENGINE_EARLY_REPLACEMENTS = Counter("delta_destination_engine_early_replacements", "Engine processes replaced for "
                                    "memory sooner than their bound's own rule allows (each one also logged as a "
                                    "warning), by engine.", ("engine",), registry=REGISTRY)
ENGINE_MEMORY_BOUND = Gauge("delta_destination_engine_memory_bound_bytes", "The memory bound of the current "
                            "supervised engine process (derived: its size once warm + the headroom), by engine.",
                            ("engine",), registry=REGISTRY)
ENGINE_MEMORY = Gauge("delta_destination_engine_resident_bytes", "Resident memory of the engine processes this "
                      "process runs (supervised Sail processes and local Spark JVMs), by engine.", ("engine",),
                      registry=REGISTRY)
ENGINE_PROCESSES = Gauge("delta_destination_engine_processes", "Engine processes this process runs now, by engine.",
                         ("engine",), registry=REGISTRY)
ICEBERG_MIRRORS = Counter("delta_destination_iceberg_mirrors", "Iceberg mirror runs after a commit (setting iceberg), "
                          "by outcome: mirrored, current (nothing new), stale (deletion vectors: the Iceberg side keeps "
                          "an older version), unmirrorable (a feature Iceberg metadata cannot say), failed.",
                          ("outcome",), registry=REGISTRY)
ICEBERG_CATALOG_ENTRIES = Counter("delta_destination_iceberg_catalog_entries", "Iceberg catalog entries brought to "
                                  "a table's newest Iceberg metadata after its mirror (setting iceberg_catalog_uri), by "
                                  "outcome: registered, moved, current, ahead (another writer published a newer one), "
                                  "foreign (the name is another table's: left alone), failed.",
                                  ("outcome",), registry=REGISTRY)

# Sources of the engine gauges, read at scrape time: engine -> () -> (processes, resident bytes).
_engine_sources: dict[str, Callable[[], tuple[int, int]]] = {}
_sources_lock = threading.Lock()


def request_finished(door: str, request: str, outcome: str) -> None:
    REQUESTS.labels(door, request, outcome).inc()


def rows_committed(door: str, inserted: int, updated: int, deleted: int) -> None:
    for operation, n in (("insert", inserted), ("update", updated), ("delete", deleted)):
        if n:
            ROWS.labels(door, operation).inc(n)


def iceberg_mirrored(outcome: str) -> None:
    ICEBERG_MIRRORS.labels(outcome).inc()


def iceberg_catalog_entry(outcome: str) -> None:
    ICEBERG_CATALOG_ENTRIES.labels(outcome).inc()


def engine_chosen(engine: str, reason: str) -> None:
    ENGINE_CHOICES.labels(engine, reason).inc()


def engine_restarted(cause: str, engine: str = "sail") -> None:
    ENGINE_RESTARTS.labels(engine, cause).inc()


def engine_process_ended(cause: str, requests: int, early: bool = False, engine: str = "sail") -> None:
    """A supervised engine process was replaced (or died) after serving `requests`; `early`: sooner
    than its bound's rule allows."""
    ENGINE_PROCESS_REQUESTS.labels(engine, cause).observe(requests)
    if early:
        ENGINE_EARLY_REPLACEMENTS.labels(engine).inc()


def engine_memory_bound(bound_bytes: int, engine: str = "sail") -> None:
    ENGINE_MEMORY_BOUND.labels(engine).set(bound_bytes)


def watch_engine(engine: str, source: Callable[[], tuple[int, int]]) -> None:
    """Report `source()` (processes, resident bytes) as the engine's gauges at each scrape; the
    last source registered for an engine wins (one EnginePool per door process)."""
    with _sources_lock:
        _engine_sources[engine] = source
    ENGINE_MEMORY.labels(engine).set_function(lambda: _read(engine)[1])
    ENGINE_PROCESSES.labels(engine).set_function(lambda: _read(engine)[0])


def _read(engine: str) -> tuple[int, int]:
    with _sources_lock:
        source = _engine_sources.get(engine)
    try:
        return source() if source is not None else (0, 0)
    except Exception:  # noqa: BLE001 - a scrape never fails for one gauge
        return (0, 0)


class CommitMetrics:
    """A core events listener (core/events.py): commit latency and committed rows."""

    def __init__(self):
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()

    def started(self, event) -> None:
        with self._lock:
            self._started[event.run_id] = time.monotonic()

    def completed(self, event, outcome) -> None:
        with self._lock:
            began = self._started.pop(event.run_id, None)
        if not outcome.committed:
            return
        if began is not None:
            COMMIT_SECONDS.labels(event.door).observe(time.monotonic() - began)
        rows_committed(event.door, outcome.inserted or 0, outcome.updated or 0, outcome.deleted or 0)

    def failed(self, event, error) -> None:
        with self._lock:
            self._started.pop(event.run_id, None)


def parse_address(value: str) -> tuple[str, int]:
    """`9464` (every interface, like the gRPC port) or `127.0.0.1:9464`.
    >>> parse_address("9464"), parse_address("127.0.0.1:9464"), parse_address("[::1]:9464")
    (('0.0.0.0', 9464), ('127.0.0.1', 9464), ('::1', 9464))
    """
    text = value.strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "0.0.0.0", text
    return host.strip("[]") or "0.0.0.0", int(port)


_served: list = []


def serve(address: str) -> Optional[int]:
    """Serve the text endpoint (`/metrics`) on a thread of its own; returns the port (None when
    `address` is empty: metrics off). Once per process."""
    if not address or _served:
        return None
    host, port = parse_address(address)
    try:
        server, _thread = start_http_server(port, addr=host, registry=REGISTRY)
    except OSError as exc:
        raise InvalidRequest(f"cannot serve metrics on {host}:{port} ({exc.strerror})") from None
    _served.append(server)
    bound = server.server_address[1]
    log.info(f"metrics served on {host}:{bound}/metrics (pid {os.getpid()})")
    return bound
