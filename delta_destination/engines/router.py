"""The engine router: the one way the core gets an engine.

The core never names an engine. It asks the router for a *lease* -- for an operation that opens
no table (`lease`), for one that opens a table (`table_lease`, given the table's size), for
table upkeep (`lease(upkeep=True)`) or for the metastore (`catalog_lease`) -- and gets back the
engine session to use, which engine that is and why (for the log line). What a write does on it
is the core's plan (core/write_plan.py, from the dialects' facts this module hands on); the lease
only carries it out: `move_to` another engine when the plan says so, and what other engines must
forget once an operation changed a table behind their back (done when the lease ends).

Which engine serves what is decided by the pure rules of choice.py; the pool (pool.py) starts,
supervises and connects the engines.
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Iterator, Optional

from .. import logs, metrics
from ..settings import AUTO, Runtime, Settings
from .choice import (SAIL, SPARK, EngineChoice, base_choice, column_change_choice, merge_choice, should_prestart,
                     small_statements, spark_available, upkeep_choice)
from .dialect import COLUMN_MAPPING, COLUMN_MAPPING_UPGRADE, MAPPED_MODES, Dialect, delta_widens, dialect_for
from .pool import EnginePool
from .session import EngineSession
from .supervisor import recycle_policy

log = logs.get(__name__)

# What the core may use of engines/ besides leases: the choice's type and its pure MERGE rule, and
# each engine's dialect facts (read by the core's pure write planner, core/write_plan.py).
__all__ = ["EngineRouter", "EngineLease", "EngineSession", "EngineChoice", "Dialect", "check_warehouse", "dialect_for",
           "merge_choice", "column_change_choice", "delta_widens", "SAIL", "SPARK", "COLUMN_MAPPING",
           "COLUMN_MAPPING_UPGRADE", "MAPPED_MODES"]


@dataclass
class EngineLease:
    """An engine for one operation: its session (`session`), the settings with the engine that
    serves it (never auto), and which engine that is and why (`choice`)."""

    session: EngineSession
    settings: Settings
    choice: EngineChoice
    router: "EngineRouter"
    request: Settings                      # the request's own settings (engine auto stays auto)
    small: bool = False                    # on the engine's session for small statements
    _leases: ExitStack = field(default_factory=ExitStack)

    @property
    def served_by(self) -> str:
        """The engine and why, for the operation's log line."""
        return f"engine {self.session.name} ({self.choice.reason}{'; small statements' if self.small else ''})"

    def move_to(self, choice: EngineChoice) -> None:
        """The core's plan runs the MERGE on another engine (core/write_plan.py: auto hands a MERGE
        over Sail's memory budget to Apache Spark): the lease takes that engine's session, before
        anything is written."""
        log.info(f"moving the request to Apache Spark: {choice.reason}")
        metrics.engine_chosen(choice.engine, choice.code)
        self.settings = choice.settings(self.request)
        self.session = self._leases.enter_context(self.router.pool.lease(self.settings, on_demand=True))
        self.choice = choice

    def close(self, location: Optional[str]) -> None:
        """The operation ended: a lease taken on the way ends, and an operation auto ran on Spark
        makes the embedded engine's sessions drop their entry of the table (`location`): Sail's
        entry keeps the schema it saw when registered, and its MERGE casts to it (dialect.SailDialect).
        The next Sail statement registers the table again."""
        self._leases.close()
        if location is not None and self.choice.auto and self.session.name == SPARK:
            for sail in self.router.pool.sessions_of(SAIL):
                try:
                    sail.schema_changed(location)
                except Exception as exc:  # noqa: BLE001 - an engine that does not answer has no entry to keep
                    log.warning(f"could not refresh Sail's entry of a table Spark changed ({type(exc).__name__})")


def check_warehouse(settings: Settings, root: Optional[str] = None) -> None:
    """Refuse a warehouse root the engine the settings choose would write somewhere else than
    asked (InvalidRequest), before any work (also at a door's start-up)."""
    dialect_for(base_choice(settings, spark_available(settings)).engine).check_warehouse_root(root or settings.warehouse)


class EngineRouter:
    """Hands out leases (see the module docstring)."""

    def __init__(self, pool: EnginePool):
        self.pool = pool

    @classmethod
    def for_runtime(cls, options: Runtime, door: str) -> "EngineRouter":
        """The router of a door's process, over an engine pool as the process's options say."""
        return cls(EnginePool(idle_minutes=options.spark_idle_minutes, recycle=recycle_policy(options, door)))

    def choose(self, settings: Settings, upkeep: bool = False) -> EngineChoice:
        """The engine of an operation that measures no table (choice.py)."""
        return (upkeep_choice if upkeep else base_choice)(settings, spark_available(settings))

    def check_warehouse(self, settings: Settings, root: Optional[str] = None) -> None:
        check_warehouse(settings, root)

    def engines_to_check(self, settings: Settings) -> list[tuple[str, Settings]]:
        """The engines requests of these settings will use that run already or can be reached now,
        as (label, settings), for a connection check: with auto the embedded engine, and the
        remote Apache Spark server when one is configured (a local one is started only when needed)."""
        base = self.choose(settings)
        out = [(f"the {'embedded Sail' if base.engine == SAIL else 'Apache Spark'} engine", base.settings(settings))]
        if settings.engine == AUTO and settings.spark_remote and base.engine == SAIL:
            out.append((f"the Apache Spark server at {settings.spark_remote_shown}", replace(settings, engine=SPARK)))
        return out

    def silent_engines(self, settings: Settings) -> list[str]:
        """The labels of `engines_to_check` whose engine did not answer (a setup test's result)."""
        return [label for label, served in self.engines_to_check(settings) if not self.pool.answers(served)]

    # ---- the doors' calls (through DeltaCore): start, warm up, health, stop. Not a request's
    # choice, so not counted in the engine-choice metric.
    def start(self, settings: Settings) -> None:
        """Start (or connect to) the engine requests of these settings go to first; raises what
        the start raised."""
        choice = self.choose(settings)
        with self.pool.lease(choice.settings(settings), on_demand=choice.auto):
            pass

    def warm_up(self, settings: Settings) -> None:
        """A configured local Apache Spark engine that runs is warmed up in the background (pool.warm_up)."""
        if settings.engine == SPARK and not settings.spark_remote:
            self.pool.warm_up_in_background(settings)

    def healthy(self, settings: Settings) -> bool:
        """Does the engine requests of these settings go to first answer now (a local one that died
        is not restarted: see EnginePool.healthy)?"""
        return self.pool.healthy(self.choose(settings).settings(settings))

    def answers(self, settings: Settings) -> bool:
        """Can that engine be reached, starting (or restarting) a local one if needed?"""
        choice = self.choose(settings)
        return self.pool.answers(choice.settings(settings), on_demand=choice.auto)

    def stop(self) -> None:
        """Every engine process stops (a start in progress is cancelled)."""
        self.pool.stop()

    def notice(self, settings: Settings) -> Optional[str]:
        """What an operator should know of how requests of these settings are served (None: nothing
        beyond the usual): e.g. a warehouse the embedded engine cannot reach."""
        base = self.choose(settings)
        return base.reason if base.code == "warehouse_unreachable" else None

    @contextmanager
    def lease(self, settings: Settings, upkeep: bool = False) -> Iterator[EngineLease]:
        """An engine for an operation that opens no table (connection checks, DDL of a missing table,
        describing, migrations) or, with `upkeep`, for table upkeep."""
        choice = self.choose(settings, upkeep)
        with self._leased(settings, choice) as lease:
            yield lease

    def measures_tables(self, settings: Settings) -> bool:
        """Does the engine of an operation on a table depend on the table's size (engine auto with
        both engines: table_lease's `table_bytes`)?"""
        base = self.choose(settings)
        return base.auto and base.engine == SAIL and spark_available(settings)

    def spark_available(self, settings: Settings) -> bool:
        """Has auto an Apache Spark engine to hand a request to (choice.spark_available)?"""
        return spark_available(settings)

    @contextmanager
    def table_lease(self, settings: Settings, table_bytes: Optional[int],
                    location: Optional[str] = None, batch_bytes: Optional[int] = None) -> Iterator[EngineLease]:
        """An engine for an operation on one table. With engine auto, `table_bytes` (the table's live
        Parquet bytes from its Delta log, None when unknown; the core measures it where
        `measures_tables`) decides: the embedded engine, unless the table is already too big for a
        MERGE there; a table nearing that size has the Spark engine started ahead. `location`: the table's, for what other engines must forget when the
        lease ends (see EngineLease.close). `batch_bytes`: the operation's batch (Arrow), when it was
        read before: a small batch into a small table gets the engine's session for small
        statements (choice.small_statements)."""
        base = self.choose(settings)
        target = table_bytes
        choice = base
        if base.auto and base.engine == SAIL and spark_available(settings):
            budget = settings.memory_budget_bytes
            choice = merge_choice(base, True, target, 0, budget)
            if choice.engine == SAIL and not settings.spark_remote and should_prestart(base, True, target, budget):
                self.pool.prestart_spark(settings)
        small = small_statements(choice.engine, batch_bytes, lambda: target)
        with self._leased(settings, choice, small) as lease:
            try:
                yield lease
            finally:
                lease.close(location)

    @contextmanager
    def catalog_lease(self, settings: Settings) -> Iterator[EngineLease]:
        """The engine that writes the entries of the catalog `settings.catalog_uri` names
        (core/catalogs): for the Hive Metastore Apache Spark, whose session catalog it is (a local
        engine is started with that metastore; a remote one must have been)."""
        choice = EngineChoice(SPARK, "the metastore is written by Apache Spark", settings.engine == AUTO, "catalog")
        with self._leased(settings, choice) as lease:
            yield lease

    @contextmanager
    def _leased(self, settings: Settings, choice: EngineChoice, small: bool = False) -> Iterator[EngineLease]:
        metrics.engine_chosen(choice.engine, choice.code)
        served = choice.settings(settings)
        with self.pool.lease(served, on_demand=choice.auto, small=small) as session:
            lease = EngineLease(session, served, choice, self, settings, small)
            try:
                yield lease
            finally:
                lease._leases.close()
