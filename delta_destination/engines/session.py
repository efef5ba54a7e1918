"""Spark Connect sessions: one per engine endpoint, shared by all request threads (the
Spark Connect client is thread-safe; temp views get unique names per request).

The engine behind a session is chosen by Settings: embedded Sail (started in this
process on first use), the local Apache Spark engine (a child JVM, see spark_process.py),
or any remote Spark Connect endpoint.
"""
from __future__ import annotations

import os
import threading
from .. import logs
from ..errors import EngineUnavailable
from ..settings import Settings
from .dialect import dialect_for
from .engine_session import EngineSession

log = logs.get(__name__)

# The full pyspark package (needed for the local Apache Spark engine) builds classic
# Columns in pyspark.sql.functions unless told that this process only speaks Spark Connect.
os.environ.setdefault("SPARK_CONNECT_MODE_ENABLED", "1")

SESSION_CONF = {
    # Timestamps in SQL literals and results are UTC; Fivetran's UTC_DATETIME is UTC.
    "spark.sql.session.timeZone": "UTC",
    # Failing casts raise instead of silently producing NULL (never alter customer data).
    "spark.sql.ansi.enabled": "true",
}


def _engine_retry_policy():
    """The client retries an unreachable engine for about half a minute (PySpark's default
    keeps going for over ten minutes), then the request fails with UNAVAILABLE and the
    caller retries later."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    return DefaultPolicy(max_retries=8, backoff_multiplier=4.0, initial_backoff=100, max_backoff=5000)


class Engines:
    """Starts and connects engines on demand; `get(settings)` is the only way in."""

    def __init__(self):
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], EngineSession] = {}
        self._embedded = None  # EmbeddedSail
        self._local_spark = None  # LocalSparkServer
        self._stopped = False

    def _refuse_once_stopped(self) -> None:
        """Called under the lock: a health check or request still running at shutdown must
        not start an engine that nobody would stop (its JVM and scratch folder would outlive us)."""
        if self._stopped:
            raise EngineUnavailable("the destination is stopping")

    def _url(self, settings: Settings) -> str:
        if settings.spark_remote:
            return settings.spark_remote
        if settings.engine == "sail":
            with self._lock:
                self._refuse_once_stopped()
                if self._embedded is None:
                    from .sail import EmbeddedSail

                    self._embedded = EmbeddedSail()
                return self._embedded.url
        with self._lock:
            self._refuse_once_stopped()
            if self._local_spark is not None and not self._local_spark.alive():
                log.warning("the local Spark engine exited; starting a new one")
                dead = self._local_spark.url
                for key in [k for k in self._sessions if k[1] == dead]:
                    del self._sessions[key]
                self._local_spark.stop()
                self._local_spark = None
            if self._local_spark is None:
                from .spark_process import LocalSparkServer

                self._local_spark = LocalSparkServer()
            return self._local_spark.url

    def get(self, settings: Settings) -> EngineSession:
        """The session for these settings: one per engine endpoint and storage configuration
        (a session carries the storage settings of its warehouse)."""
        url = self._url(settings)
        dialect = dialect_for(settings.engine)
        storage = dialect.storage_conf(settings.warehouse, settings.storage)
        key = (settings.engine, url, settings.storage.identity() if storage else "")
        with self._lock:
            session = self._sessions.get(key)
            if session is not None:
                return session
        session = EngineSession(connect(url, {**dialect.session_conf, **storage}), dialect)
        with self._lock:
            return self._sessions.setdefault(key, session)

    def healthy(self, settings: Settings) -> bool:
        """Does the engine answer now? A local engine that died is not restarted here (the
        health service must see the outage); `get` restarts it."""
        if settings.engine == "spark" and not settings.spark_remote:
            if self._local_spark is None or not self._local_spark.alive():
                return False
        return self.answers(settings)

    def answers(self, settings: Settings) -> bool:
        """Can the engine be reached, starting (or restarting) a local one if needed?"""
        try:
            self.get(settings).answers()
            return True
        except Exception:  # noqa: BLE001 - any failure means "does not answer"
            return False

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            sessions = list(self._sessions.values())
            self._sessions.clear()
            embedded, self._embedded = self._embedded, None
            local_spark, self._local_spark = self._local_spark, None
        for s in sessions:
            try:
                s.spark.stop()
            except Exception:  # noqa: BLE001 - shutting down
                pass
        for engine in (embedded, local_spark):
            if engine is not None:
                try:
                    engine.stop()
                except Exception:  # noqa: BLE001 - shutting down
                    pass


def connect(url: str, dialect_conf: dict[str, str]):
    """A Spark Connect session with the destination's settings (UTC, ANSI and the dialect's),
    checked with one query; also what scripts measuring an engine use, so they measure the
    same session the destination runs."""
    from pyspark.sql.connect.session import SparkSession

    try:
        spark = SparkSession.builder.remote(url).create()
        # Before the first RPC: the default policy retries an unreachable engine for 10+ minutes.
        spark.client.set_retry_policies([_engine_retry_policy()])
        for k, v in {**SESSION_CONF, **dialect_conf}.items():
            spark.conf.set(k, v)
        spark.sql("SELECT 1").collect()
        return spark
    except Exception as exc:  # connection problems surface here
        raise EngineUnavailable(f"cannot reach the Spark Connect engine: {type(exc).__name__}") from exc
