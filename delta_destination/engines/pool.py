"""Spark Connect sessions: one per engine endpoint, shared by all request threads (the
Spark Connect client is thread-safe; temp views get unique names per request).

The engine behind a session is chosen by Settings: the embedded Sail engine (a supervised
process of its own, started on first use: supervisor.py), the local Apache Spark engine (a
child JVM, see spark_process.py), or any remote Spark Connect endpoint. Requests lease a
session for as long as they use it (`EnginePool.lease`).
"""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Iterator, Optional

from .. import logs, metrics
from ..errors import EngineUnavailable, InvalidRequest, UnsupportedOperation
from ..storage import store_for
from ..settings import AUTO, Settings, default_of
from .choice import local_spark_reaches
from .dialect import dialect_for
from .session import EngineSession
from .supervisor import RecyclePolicy, SupervisedEngine

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


def _engine_retry_policy(alive: Optional[Callable[[], bool]] = None):
    """The client retries an unreachable engine for about half a minute (PySpark's default
    keeps going for over ten minutes), then the request fails with UNAVAILABLE and the
    caller retries later. `alive`: for an engine process this process runs, whether it still
    does; a dead one is not retried at all (its requests fail at once, the next request gets a
    new process), where the default would retry a port nobody listens on for half a minute."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    class EnginePolicy(DefaultPolicy):
        def can_retry(self, e: BaseException) -> bool:
            return (alive is None or alive()) and super().can_retry(e)

    return EnginePolicy(max_retries=8, backoff_multiplier=4.0, initial_backoff=100, max_backoff=5000)


class EnginePool:
    """Starts and connects engines on demand; `lease(settings)` is the way in.

    Engines run here: Sail processes, one at a time per storage configuration (this process's
    own environment, and each configuration a request's settings give otherwise: sail.py),
    each supervised (supervisor.py: replaced between requests when it grows past the recycle
    policy's bound, restarted after a crash); one local Apache Spark JVM per metastore (catalog
    settings are static in Spark), started lazily. Sessions: one per engine process and
    storage configuration.

    With engine `auto` (engines/choice.py) a local Spark engine is started when a request needs
    it, outside the lock (requests on Sail never wait for a JVM), warmed up in the background
    when it was started ahead, and stopped after `idle_minutes` without work (0: kept).

    Hadoop keeps one client per bucket or container per JVM (`Store.spark_filesystem`), made with
    the credentials of whichever session reached it first, and reuses it for every later session
    silently. So a Spark engine serves each such place with one storage configuration only; another
    one for the same place is refused, never served with the wrong credentials.
    """

    def __init__(self, idle_minutes: float = default_of("spark_idle_minutes"), recycle: Optional[RecyclePolicy] = None):
        self._lock = threading.Lock()
        self._sessions: dict[tuple, EngineSession] = {}
        self._sail: dict[str, SupervisedEngine] = {}  # storage identity ("" = this process's environment)
        self._supervised_urls: set[str] = set()       # endpoints of the supervised engine processes
        self.recycle = recycle or RecyclePolicy()
        self._local_spark: dict[Optional[str], object] = {}  # catalog_uri -> LocalSparkServer
        self._spark_starts: dict[Optional[str], threading.Event] = {}  # catalog_uri -> set when its start ended
        self._on_demand: set[Optional[str]] = set()  # local Spark engines auto started (stopped when idle)
        self._bucket_identity: dict[tuple[str, str], str] = {}  # (Spark url, bucket) -> storage identity
        self._stopped = False
        self.idle_seconds = idle_minutes * 60.0
        self._reaper: Optional[threading.Thread] = None
        # Set by stop(): wakes the idle reaper and cancels a local Spark start in progress (a
        # SIGTERM during a start under load must not wait a minute for the JVM to listen).
        self._stopping = threading.Event()
        metrics.watch_engine("sail", self._sail_usage)
        metrics.watch_engine("spark", self._spark_usage)

    def _refuse_once_stopped(self) -> None:
        """Called under the lock: a health check or request still running at shutdown must
        not start an engine that nobody would stop (its JVM and scratch folder would outlive us)."""
        if self._stopped:
            raise EngineUnavailable("the destination is stopping")

    def _forget_sessions_of(self, url: str) -> list[EngineSession]:
        """Under the lock: the sessions of an engine that ended (or is about to) leave the lookup."""
        gone = [self._sessions.pop(k) for k in [k for k in self._sessions if k[1] == url]]
        for key in [k for k in self._bucket_identity if k[0] == url]:
            del self._bucket_identity[key]
        return gone

    def _release_sessions_of(self, url: str) -> None:
        """A supervised engine process ends: its sessions are forgotten and told so."""
        with self._lock:
            gone = self._forget_sessions_of(url)
            self._supervised_urls.discard(url)
        release_sessions(gone, timeout=5.0)

    # ---- Sail ----------------------------------------------------------------------------------
    def _sail_supervisor(self, settings: Settings) -> SupervisedEngine:
        from .sail import SailProcess, sail_environment, storage_identity

        store = store_for(settings.warehouse)
        if store.embedded_refusal:
            raise UnsupportedOperation(store.embedded_refusal)
        identity = storage_identity(settings.storage)
        with self._lock:
            self._refuse_once_stopped()
            supervisor = self._sail.get(identity)
            if supervisor is None:
                env = sail_environment(settings.storage, returning_allocator=self.recycle.derived)
                label = "the Sail engine" if not identity else "the Sail engine of a warehouse with its own storage settings"
                supervisor = self._sail[identity] = SupervisedEngine(lambda: SailProcess(env), self.recycle,
                                                                     self._release_sessions_of, label)
            return supervisor

    def _sail_usage(self) -> tuple[int, int]:
        with self._lock:
            supervisors = list(self._sail.values())
        return sum(len(s.pids()) for s in supervisors), sum(s.resident_bytes() for s in supervisors)

    def _spark_usage(self) -> tuple[int, int]:
        from .sail import resident_bytes

        with self._lock:
            engines = [e for e in self._local_spark.values() if e.alive()]
        return len(engines), sum(resident_bytes(e.pid) or 0 for e in engines)

    def sail_pids(self) -> list[int]:
        """PIDs of the Sail engine processes running now (tests, diagnostics)."""
        with self._lock:
            supervisors = list(self._sail.values())
        return [pid for s in supervisors for pid in s.pids()]

    def _spark_url(self, settings: Settings, on_demand: bool) -> str:
        """The local Spark engine for the settings' metastore, started (once, by one thread, outside
        the lock) when there is none or it died."""
        from .spark_process import LocalSparkServer, SparkProcessOptions

        store = store_for(settings.warehouse)
        if not local_spark_reaches(settings.warehouse):
            missing = (f"its {store.local_spark_jar} jar is missing from its jars (run `make install`)"
                       if store.local_spark_wired else "it is not wired for them yet")
            raise UnsupportedOperation(f"the local Apache Spark engine cannot serve {store.name} warehouses: {missing}; "
                                       "use the embedded engine (engine auto or sail) or a spark_remote server that "
                                       "reaches the warehouse")
        catalog_uri = settings.catalog_uri or None
        while True:
            with self._lock:
                self._refuse_once_stopped()
                engine = self._local_spark.get(catalog_uri)
                if engine is not None and not engine.alive():
                    log.warning("the local Spark engine exited; starting a new one")
                    metrics.engine_restarted("crash", "spark")
                    self._forget_sessions_of(engine.url)
                    engine.stop()
                    self._local_spark.pop(catalog_uri)
                    engine = None
                if engine is not None:
                    if not on_demand:
                        self._on_demand.discard(catalog_uri)  # asked for by name: kept
                    return engine.url
                starting = self._spark_starts.get(catalog_uri)
                if starting is None:
                    starting = self._spark_starts[catalog_uri] = threading.Event()
                    break
            starting.wait()  # another thread starts it; then look again (it may have failed)
            with self._lock:
                if catalog_uri not in self._local_spark:
                    raise EngineUnavailable("the local Spark engine did not start (see the log line of its start)")
        try:
            engine = LocalSparkServer(SparkProcessOptions(catalog_uri=catalog_uri), cancelled=self._stopping)
            with self._lock:
                if self._stopped:
                    engine.stop()
                    raise EngineUnavailable("the destination is stopping")
                self._local_spark[catalog_uri] = engine
                if on_demand:
                    self._on_demand.add(catalog_uri)
                    self._start_reaper()
            return engine.url
        finally:
            with self._lock:
                self._spark_starts.pop(catalog_uri).set()

    @contextmanager
    def lease(self, settings: Settings, on_demand: bool = False, small: bool = False) -> Iterator[EngineSession]:
        """The session for these settings, held for the block: an engine process is never
        replaced or stopped when idle under a lease. One session per engine process and storage
        configuration (a session carries the storage settings of its warehouse), and a second one
        for small statements where the engine's dialect has settings for them (`small`:
        choice.small_statements). The settings name the engine (never auto: the router resolved
        it, engines/router.py); `on_demand`: a local Spark engine this starts was chosen by auto,
        and is stopped when idle."""
        session, done = self._acquire(settings, on_demand, small)
        try:
            yield session
        finally:
            done()

    def _acquire(self, settings: Settings, on_demand: bool, small: bool = False
                 ) -> tuple[EngineSession, Callable[[], None]]:
        """A held session and what ends its lease."""
        if settings.engine == AUTO:
            raise ValueError("engine auto reached the engine pool unresolved: the router chooses the engine")
        supervisor = generation = None
        alive = None
        if settings.engine == "sail" and not settings.spark_remote:
            supervisor = self._sail_supervisor(settings)
            generation = supervisor.acquire()
            url, alive = generation.url, generation.process.alive
            with self._lock:
                self._supervised_urls.add(url)
        else:
            url = self._url(settings, on_demand)
        try:
            session = self._session(settings, url, alive, small)
        except BaseException:
            if generation is not None:
                supervisor.release(generation)
            raise

        def done() -> None:
            session.release()
            if generation is not None:
                supervisor.release(generation)
                if generation.stopped:   # it died while this lease connected: no session of it stays
                    self._release_sessions_of(url)

        return session, done

    def _session(self, settings: Settings, url: str, alive: Optional[Callable[[], bool]],
                 small: bool = False) -> EngineSession:
        """The held session of the engine at `url` for these settings (connected on first use).
        `alive`: the liveness of an engine process this destination supervises (None: not one)."""
        dialect = dialect_for(settings.engine, own_process=alive is not None, storage=settings.storage)
        storage = dialect.storage_conf(settings.warehouse, settings.storage)
        # A Spark session spells locations with its settings (dialect_for): one per configuration.
        identity = settings.storage.identity() if storage or settings.engine == "spark" else ""
        small = small and bool(dialect.small_statement_conf)
        key = (settings.engine, url, identity, small)
        with self._lock:
            self._check_bucket(settings, url, identity)
            session = self._sessions.get(key)
            if session is not None:
                session.hold()
                return session
        conf = {**dialect.session_conf, **(dialect.small_statement_conf if small else {}), **storage}
        session = EngineSession(connect(url, conf, alive), dialect)
        with self._lock:
            session = self._sessions.setdefault(key, session)
            session.hold()
            return session

    def _url(self, settings: Settings, on_demand: bool) -> str:
        """The endpoint of a Spark engine: the remote one, or the local one (started if needed)."""
        if settings.spark_remote:
            return settings.spark_remote
        return self._spark_url(settings, on_demand)

    def sessions_of(self, engine: str) -> list[EngineSession]:
        """The open sessions of one engine kind whose process takes new requests (nothing is
        started; a replaced Sail process finishing its last requests is left out)."""
        with self._lock:
            supervisors = list(self._sail.values())
        current = {sup.current_url() for sup in supervisors}
        with self._lock:
            return [s for key, s in self._sessions.items()
                    if key[0] == engine and (key[1] not in self._supervised_urls or key[1] in current)]

    def prestart_spark(self, settings: Settings) -> None:
        """Start (and warm up) the local Spark engine in the background, for a request that will
        soon need it; nothing happens when it runs or is starting."""
        catalog_uri = settings.catalog_uri or None
        with self._lock:
            if self._stopped or catalog_uri in self._local_spark or catalog_uri in self._spark_starts:
                return
        spark = replace(settings, engine="spark")

        def start():
            try:
                self._spark_url(spark, on_demand=True)
                log.info("the local Apache Spark engine was started ahead: a table nears Sail's memory budget")
                # Warmed up after it is handed out: a request that needs it meanwhile does not wait for
                # the warm-up (the benchmark's first Spark request waited 59 s for it).
                self.warm_up_in_background(spark)
            except Exception as exc:  # noqa: BLE001 - the request that needs it will start it and report
                log.warning(f"starting the local Spark engine ahead failed ({type(exc).__name__})")

        threading.Thread(target=start, name="spark-prestart", daemon=True).start()

    def warm_up_in_background(self, settings: Settings) -> None:
        """Warm up the running local Spark engine of these settings while the destination serves
        (after start-up, or after it was started ahead: a request then finds Delta's classes loaded
        and compiled, and one that comes sooner runs beside the warm-up instead of waiting)."""
        with self._lock:
            engine = self._local_spark.get(settings.catalog_uri or None)
        if engine is not None:
            threading.Thread(target=warm_up_quietly, args=(engine,), name="spark-warm-up", daemon=True).start()

    def _check_bucket(self, settings: Settings, url: str, identity: str) -> None:
        """Under the lock: one storage configuration per bucket or container per Spark engine (see
        the class)."""
        if settings.engine != "spark":
            return
        store = store_for(settings.warehouse)
        place = store.spark_filesystem(settings.warehouse, settings.storage)
        if not place:
            return
        first = self._bucket_identity.setdefault((url, place), identity)
        if first != identity:
            what = store.place_noun
            raise InvalidRequest(
                f"the Apache Spark engine already reaches {what} {place} with other storage settings, and Hadoop "
                f"keeps one client per {what} per engine (it would use the first settings' credentials). Use one "
                f"set of storage settings per {what}, or another destination process for the other settings")

    # ---- idle stop --------------------------------------------------------------------------
    def _start_reaper(self) -> None:
        """Under the lock: one thread stops auto-started Spark engines that stay idle."""
        if self.idle_seconds <= 0 or self._reaper is not None:
            return
        self._reaper = threading.Thread(target=self._reap, name="spark-idle-stop", daemon=True)
        self._reaper.start()

    def _reap(self) -> None:
        period = max(0.5, min(30.0, self.idle_seconds / 4))
        while not self._stopping.wait(period):
            self.stop_idle()

    def stop_idle(self) -> list[int]:
        """Stop the auto-started local Spark engines with no statement running and none for
        `idle_seconds`; returns their former PIDs."""
        now = time.monotonic()
        stopping = []
        with self._lock:
            for catalog_uri in list(self._on_demand):
                engine = self._local_spark.get(catalog_uri)
                if engine is None:
                    self._on_demand.discard(catalog_uri)
                    continue
                sessions = [s for k, s in self._sessions.items() if k[1] == engine.url]
                if any(s.busy for s in sessions):
                    continue
                last = max([s.last_used for s in sessions] + [engine.started_at])
                if now - last < self.idle_seconds:
                    continue
                self._forget_sessions_of(engine.url)
                self._local_spark.pop(catalog_uri)
                self._on_demand.discard(catalog_uri)
                stopping.append((engine, sessions))
        pids = []
        for engine, sessions in stopping:
            log.info(f"stopping the local Apache Spark engine (pid {engine.pid}): idle for "
                     f"{self.idle_seconds / 60:.1f} min")
            pids.append(engine.pid)
            release_sessions(sessions)
            engine.stop()
            metrics.engine_restarted("idle", "spark")
        return pids

    def healthy(self, settings: Settings) -> bool:
        """Does the engine answer now? A local engine that died is not restarted here (the
        health service must see the outage); `lease` restarts it. The settings name the engine the
        router resolved (EngineRouter.healthy); a local Spark engine answers only while it runs."""
        if settings.engine == "spark" and not settings.spark_remote:
            engine = self._local_spark.get(settings.catalog_uri or None)
            if engine is None or not engine.alive():
                return False
        if settings.engine == "sail" and not settings.spark_remote and not self._sail_supervisor(settings).alive():
            return False
        return self.answers(settings)

    def answers(self, settings: Settings, on_demand: bool = False) -> bool:
        """Can the engine be reached, starting (or restarting) a local one if needed (`on_demand`: see lease)?"""
        try:
            with self.lease(settings, on_demand) as session:
                session.answers()
            return True
        except Exception:  # noqa: BLE001 - any failure means "does not answer"
            return False

    def local_spark_pids(self) -> list[int]:
        """PIDs of the local Spark JVMs running now (tests, diagnostics)."""
        with self._lock:
            return [e.pid for e in self._local_spark.values() if e.alive() and e.pid]

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            self._stopped = True
            sessions = list(self._sessions.values())
            self._sessions.clear()
            engines = [*self._sail.values(), *self._local_spark.values()]
            self._sail.clear()
            self._local_spark.clear()
        release_sessions(sessions)
        for engine in engines:
            if engine is not None:
                try:
                    engine.stop()
                except Exception:  # noqa: BLE001 - shutting down
                    pass


def release_sessions(sessions: list[EngineSession], timeout: float = 10.0) -> None:
    """Tell the engines the sessions are over, within `timeout` in all. PySpark's release retries
    an unreachable engine for minutes whatever retry policy the session has: a destination
    stopping after its remote engine died hung in it (seen in a test run: 19 min after SIGTERM)."""
    def release(session: EngineSession) -> None:
        try:
            session.spark.stop()
        except Exception:  # noqa: BLE001 - the engine goes anyway
            pass

    threads = [threading.Thread(target=release, args=(s,), name="release-session", daemon=True) for s in sessions]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        log.warning("an engine did not answer the end of its sessions in time; stopping without it")


def warm_up_quietly(engine) -> None:
    try:
        warm_up(engine.url, engine.private_dir)
    except Exception as exc:  # noqa: BLE001 - a cold engine still serves (or it is being stopped)
        log.warning(f"the local Spark engine's warm-up did not finish ({type(exc).__name__}); it serves cold")


def warm_up(url: str, private_dir) -> None:
    """Run the statements a write runs (a local relation, a Delta create, insert, MERGE and
    read) once on a table in the engine's private folder, so that the first customer request
    does not pay for class loading and JIT compilation. Measured on 2 cores under load: the first
    100k-row create+insert+MERGE took 107 s cold and 56 s after a warm-up (which itself took
    longer than it saved): so it runs only where no request waits (docs/performance-analysis.md)."""
    import pyarrow as pa

    started = time.monotonic()
    spark = connect(url, dialect_for("spark").session_conf)
    table = f"delta.`{private_dir}/warm-up`"
    try:
        spark.createDataFrame(pa.table({"id": [1, 2], "v": ["a", "b"]})).createOrReplaceTempView("warm_up_src")
        spark.sql(f"CREATE TABLE {table} (id BIGINT, v STRING) USING delta").collect()
        spark.sql(f"INSERT INTO {table} SELECT id, v FROM warm_up_src").collect()
        spark.sql(f"MERGE INTO {table} t USING warm_up_src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v "
                  f"WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)").collect()
        spark.sql(f"SELECT count(*) FROM {table}").collect()
    finally:
        try:
            spark.stop()
        except Exception:  # noqa: BLE001
            pass
    log.info(f"the local Apache Spark engine was warmed up in {time.monotonic() - started:.1f}s")


def connect(url: str, dialect_conf: dict[str, str], alive: Optional[Callable[[], bool]] = None):
    """A Spark Connect session with the destination's settings (UTC, ANSI and the dialect's),
    checked with one query; also what scripts measuring an engine use, so they measure the
    same session the destination runs. `alive`: see _engine_retry_policy."""
    from pyspark.sql.connect.session import SparkSession

    try:
        spark = SparkSession.builder.remote(url).create()
        # Before the first RPC: the default policy retries an unreachable engine for 10+ minutes.
        spark.client.set_retry_policies([_engine_retry_policy(alive)])
        for k, v in {**SESSION_CONF, **dialect_conf}.items():
            spark.conf.set(k, v)
        spark.sql("SELECT 1").collect()
        return spark
    except Exception as exc:  # connection problems surface here
        raise EngineUnavailable(f"cannot reach the Spark Connect engine: {type(exc).__name__}") from exc
