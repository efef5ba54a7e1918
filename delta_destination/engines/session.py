"""Spark Connect sessions: one per engine endpoint, shared by all request threads (the
Spark Connect client is thread-safe; temp views get unique names per request).

The engine behind a session is chosen by Settings: embedded Sail (started in this
process on first use), the local Apache Spark engine (a child JVM, see spark_process.py),
or any remote Spark Connect endpoint.
"""
from __future__ import annotations

import os
import threading
from typing import Optional
from .. import logs
from ..errors import EngineUnavailable, InvalidRequest
from ..storage import url_scheme
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
    """Starts and connects engines on demand; `get(settings)` is the only way in.

    Engines started here: the embedded Sail server; a Sail child process per storage
    configuration the environment does not give (engines/sail.py); one local Apache Spark JVM
    per metastore (catalog settings are static in Spark), started lazily. Sessions: one per
    engine and storage configuration.

    Hadoop keeps one S3 client per bucket per JVM, made with the credentials of whichever
    session reached the bucket first, and reuses it for every later session silently. So a
    Spark engine serves each bucket with one storage configuration only; another one for the
    same bucket is refused, never served with the wrong credentials.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._sessions: dict[tuple, EngineSession] = {}
        self._embedded = None                        # EmbeddedSail
        self._sail_processes: dict[str, object] = {}  # storage identity -> SailServerProcess
        self._local_spark: dict[Optional[str], object] = {}  # catalog_uri -> LocalSparkServer
        self._bucket_identity: dict[tuple[str, str], str] = {}  # (Spark url, bucket) -> storage identity
        self._stopped = False

    def _refuse_once_stopped(self) -> None:
        """Called under the lock: a health check or request still running at shutdown must
        not start an engine that nobody would stop (its JVM and scratch folder would outlive us)."""
        if self._stopped:
            raise EngineUnavailable("the destination is stopping")

    def _forget_sessions_of(self, url: str) -> None:
        for key in [k for k in self._sessions if k[1] == url]:
            del self._sessions[key]
        for key in [k for k in self._bucket_identity if k[0] == url]:
            del self._bucket_identity[key]

    def _url(self, settings: Settings) -> str:
        if settings.spark_remote:
            return settings.spark_remote
        with self._lock:
            self._refuse_once_stopped()
            if settings.engine == "sail":
                return self._sail_url(settings)
            return self._spark_url(settings)

    def _sail_url(self, settings: Settings) -> str:
        from .sail import EmbeddedSail, SailServerProcess, served_by_embedded

        if served_by_embedded(settings.storage):
            if self._embedded is None:
                self._embedded = EmbeddedSail()
            return self._embedded.url
        identity = settings.storage.identity()
        child = self._sail_processes.get(identity)
        if child is not None and not child.alive():
            log.warning("a Sail engine process exited; starting a new one")
            self._forget_sessions_of(child.url)
            self._sail_processes.pop(identity)
            child = None
        if child is None:
            child = self._sail_processes[identity] = SailServerProcess(settings.storage)
        return child.url

    def _spark_url(self, settings: Settings) -> str:
        from .spark_process import LocalSparkServer, SparkProcessOptions

        catalog = settings.catalog_uri or None
        engine = self._local_spark.get(catalog)
        if engine is not None and not engine.alive():
            log.warning("the local Spark engine exited; starting a new one")
            self._forget_sessions_of(engine.url)
            engine.stop()
            self._local_spark.pop(catalog)
            engine = None
        if engine is None:
            engine = self._local_spark[catalog] = LocalSparkServer(SparkProcessOptions(catalog_uri=catalog))
        return engine.url

    def get(self, settings: Settings) -> EngineSession:
        """The session for these settings: one per engine endpoint and storage configuration
        (a session carries the storage settings of its warehouse)."""
        url = self._url(settings)
        dialect = dialect_for(settings.engine)
        storage = dialect.storage_conf(settings.warehouse, settings.storage)
        identity = settings.storage.identity() if storage else ""
        key = (settings.engine, url, identity)
        with self._lock:
            self._check_bucket(settings, url, identity)
            session = self._sessions.get(key)
            if session is not None:
                return session
        session = EngineSession(connect(url, {**dialect.session_conf, **storage}), dialect)
        with self._lock:
            return self._sessions.setdefault(key, session)

    def _check_bucket(self, settings: Settings, url: str, identity: str) -> None:
        """Under the lock: one storage configuration per bucket per Spark engine (see the class)."""
        if settings.engine != "spark" or url_scheme(settings.warehouse) != "s3":
            return
        bucket = settings.warehouse.split("://", 1)[1].split("/", 1)[0]
        first = self._bucket_identity.setdefault((url, bucket), identity)
        if first != identity:
            raise InvalidRequest(
                f"the Apache Spark engine already reaches bucket {bucket} with other storage settings, and Hadoop "
                f"keeps one S3 client per bucket per engine (it would use the first settings' credentials). Use one "
                f"set of storage settings per bucket, or another destination process for the other settings")

    def healthy(self, settings: Settings) -> bool:
        """Does the engine answer now? A local engine that died is not restarted here (the
        health service must see the outage); `get` restarts it."""
        if settings.engine == "spark" and not settings.spark_remote:
            engine = self._local_spark.get(settings.catalog_uri or None)
            if engine is None or not engine.alive():
                return False
        return self.answers(settings)

    def answers(self, settings: Settings) -> bool:
        """Can the engine be reached, starting (or restarting) a local one if needed?"""
        try:
            self.get(settings).answers()
            return True
        except Exception:  # noqa: BLE001 - any failure means "does not answer"
            return False

    def local_spark_pids(self) -> list[int]:
        """PIDs of the local Spark JVMs running now (tests, diagnostics)."""
        with self._lock:
            return [e.pid for e in self._local_spark.values() if e.alive() and e.pid]

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            sessions = list(self._sessions.values())
            self._sessions.clear()
            engines = [self._embedded, *self._sail_processes.values(), *self._local_spark.values()]
            self._embedded = None
            self._sail_processes.clear()
            self._local_spark.clear()
        for s in sessions:
            try:
                s.spark.stop()
            except Exception:  # noqa: BLE001 - shutting down
                pass
        for engine in engines:
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
