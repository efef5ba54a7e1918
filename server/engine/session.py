"""Spark Connect sessions: the embedded Sail engine by default, or a remote endpoint.

One SparkSession per endpoint, shared by all request threads (the Spark Connect
client is thread-safe; temp views get unique names per request).
"""
from __future__ import annotations

import os
import threading
from typing import Optional

from .. import log
from ..errors import EngineUnavailable

# The embedded engine must never spill query data (plaintext customer rows) to temporary
# files: refuse spilling outright. Operators can override through the environment.
# Its own log lines go to stderr (stdout is Fivetran's JSON log); keep them to warnings.
EMBEDDED_ENV = {"SAIL_RUNTIME__TEMPORARY_FILES__MAX_SIZE": "0", "RUST_LOG": "warn"}

SESSION_CONF = {
    # Timestamps in SQL literals and results are UTC; Fivetran's UTC_DATETIME is UTC.
    "spark.sql.session.timeZone": "UTC",
    # Failing casts raise instead of silently producing NULL (never alter customer data).
    "spark.sql.ansi.enabled": "true",
}


def _engine_retry_policy():
    """The client retries an unreachable engine for about half a minute (PySpark's default
    keeps going for over ten minutes), then the request fails with UNAVAILABLE and Fivetran
    retries the sync later from its checkpoint."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    return DefaultPolicy(max_retries=8, backoff_multiplier=4.0, initial_backoff=100, max_backoff=5000)


class SparkSessions:
    def __init__(self):
        self._lock = threading.Lock()
        self._sessions: dict[str, object] = {}
        self._embedded = None  # pysail SparkConnectServer
        self._embedded_url: Optional[str] = None

    def start_embedded(self) -> str:
        """Start Sail in-process (about a second); returns its sc:// URL."""
        with self._lock:
            if self._embedded_url is None:
                from pysail.spark import SparkConnectServer

                for k, v in EMBEDDED_ENV.items():
                    os.environ.setdefault(k, v)
                srv = SparkConnectServer(ip="127.0.0.1", port=0)
                srv.start(background=True)
                host, port = srv.listening_address
                self._embedded = srv
                self._embedded_url = f"sc://127.0.0.1:{port}"
                log.info("embedded Sail Spark Connect engine started")
            return self._embedded_url

    def get(self, remote: Optional[str]):
        url = remote or self.start_embedded()
        with self._lock:
            spark = self._sessions.get(url)
            if spark is not None:
                return spark
        spark = self._connect(url)
        with self._lock:
            return self._sessions.setdefault(url, spark)

    def _connect(self, url: str):
        from pyspark.sql.connect.session import SparkSession

        try:
            spark = SparkSession.builder.remote(url).create()
            # Before the first RPC: the default policy retries an unreachable engine for 10+ minutes.
            spark.client.set_retry_policies([_engine_retry_policy()])
            for k, v in SESSION_CONF.items():
                spark.conf.set(k, v)
            spark.sql("SELECT 1").collect()
            return spark
        except Exception as exc:  # connection problems surface here
            raise EngineUnavailable(f"cannot reach the Spark Connect engine: {type(exc).__name__}") from exc

    def healthy(self, remote: Optional[str] = None) -> bool:
        try:
            self.get(remote).sql("SELECT 1").collect()
            return True
        except Exception:
            return False

    def stop(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
            embedded, self._embedded, self._embedded_url = self._embedded, None, None
        for s in sessions:
            try:
                s.stop()
            except Exception:
                pass
        if embedded is not None:
            try:
                embedded.stop()
            except Exception:
                pass
