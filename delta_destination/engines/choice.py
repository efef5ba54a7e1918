"""Which engine serves a request when the engine setting is `auto` (the default where the
local Apache Spark engine is installed).

Embedded Sail starts in about a second, holds no JVM and is the faster engine on tables of
ordinary size, but its MERGE holds the whole target table in memory (core/memory.py). The
local Apache Spark engine streams the target, handles tables of any size, and is the only
one that can do table upkeep and register tables in a metastore, but it costs a JVM (about
1.5-3 GB and half a minute to start). So auto serves each request on Sail unless Sail cannot
serve it, and then on Spark, started on first need and stopped after an idle time
(engines/pool.py). Both engines read and write each other's tables (the tables auto
creates are Sail's: no deletion vectors, no column mapping until their first rename or drop,
column_change_choice; docs/engines.md).

The rules are pure functions of the settings and of numbers the core measured, so they are
unit-tested without an engine (tests/engines/test_auto_engine.py); each choice carries a reason
that the write's log line shows.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Callable, Optional

from ..errors import InvalidRequest
from ..frozen import is_frozen
from ..settings import AUTO, Settings
from ..storage import store_for, url_scheme
from .dialect import SailDialect

SAIL, SPARK = "sail", "spark"
# Start the Spark engine in the background once a table reaches this share of the size at which
# its MERGE moves to Spark, so that the request that crosses it does not wait for a JVM to start.
PRESTART_SHARE = 0.6
# A statement counts as small (Spark: a session without code generation, dialect.small_statement_conf)
# when its batch and its table both are: interpreted rows cost more than generating code past a
# few thousand rows, while up to here the fixed cost of generating code for Delta's own log
# replay dominates.
SMALL_BATCH_BYTES = 1 * 2**20      # of Arrow, the batch as read
SMALL_TABLE_BYTES = 4 * 2**20      # of live Parquet, from the table's Delta log


def small_statements(engine: str, batch_bytes: Optional[int], table_bytes: Callable[[], Optional[int]]) -> bool:
    """Does an operation with a batch of `batch_bytes` on a table of `table_bytes()` (None: not known)
    get the engine's session for small statements? Never when either size is unknown; the table
    (a read of its Delta log) is measured only for a small batch on Spark.
    >>> small_statements("spark", 50_000, lambda: 60_000), small_statements("spark", 50_000, lambda: None)
    (True, False)
    """
    if engine != SPARK or batch_bytes is None or batch_bytes > SMALL_BATCH_BYTES:
        return False
    size = table_bytes()
    return size is not None and size <= SMALL_TABLE_BYTES


@dataclass(frozen=True)
class EngineChoice:
    engine: str       # "sail" or "spark"
    reason: str       # why, for the log line of the request
    auto: bool        # chosen by `auto` (a local Spark engine so started is stopped when idle)
    code: str = "default"  # the reason as a short code, for metrics (never sizes or names)

    def settings(self, settings: Settings) -> Settings:
        """The request's settings with the chosen engine. Auto's embedded engine is this process's
        own Sail, whatever remote Spark server or metastore auto has for the rest (the metastore is
        written through the router's catalog lease, with the request's settings)."""
        if settings.engine == self.engine:
            return settings
        if self.engine == SAIL and settings.engine == AUTO:
            return replace(settings, engine=SAIL, spark_remote=None, catalog_uri=None)
        return replace(settings, engine=self.engine)


@lru_cache(maxsize=1)
def spark_installed() -> bool:
    """Can this installation start the local Apache Spark engine? A normal install with Java
    and the Spark/Delta jars `make install` fetched; never the single-file binary or the
    Docker image (no JVM)."""
    if is_frozen():
        return False
    from .spark_process import delta_jars, spark_home

    java_home = os.environ.get("JAVA_HOME")
    has_java = bool(shutil.which("java")) or bool(java_home and os.path.exists(os.path.join(java_home, "bin", "java")))
    if not has_java:
        return False
    try:
        delta_jars()
        return any((spark_home() / "jars").glob("spark-connect_*.jar"))
    except Exception:  # noqa: BLE001 - not installed: pyspark without jars, no Delta jars
        return False


def local_spark_reaches(warehouse: str) -> bool:
    """Is the local Spark engine wired for the warehouse's store, with the store's connector jar
    among its jars (a .spark-jars fetched before hadoop-azure was added has none)?"""
    from .spark_process import jars_dir

    store = store_for(warehouse)
    if not store.local_spark_wired:
        return False
    return not store.local_spark_jar or any(jars_dir().glob(f"{store.local_spark_jar}*.jar"))


def spark_available(settings: Settings) -> bool:
    """Has auto an Apache Spark engine: the spark_remote server, or a local one it can start and
    that reaches the warehouse (a store not wired for the local engine keeps auto on Sail, whose
    memory guard then refuses what it cannot hold instead of failing on Spark)."""
    return bool(settings.spark_remote) or (spark_installed() and local_spark_reaches(settings.warehouse))


def embedded_reaches(warehouse: str) -> bool:
    """Can the embedded engine (and the destination itself) reach the warehouse? A local path or a
    URL of a store in the table of stores (storage/stores.py), yes; other URLs (a platform's own
    storage: dbfs:/, a Unity Catalog volume, stores not supported yet) only the remote engine
    reaches, which then serves every request.
    >>> embedded_reaches("/data/wh"), embedded_reaches("s3://b/wh"), embedded_reaches("dbfs:/mnt/wh")
    (True, True, False)
    >>> embedded_reaches("abfss://c@a.dfs.core.windows.net/wh"), embedded_reaches("gs://b/wh")
    (True, False)
    """
    return url_scheme(warehouse) == "file" or store_for(warehouse).embedded_reaches


def base_choice(settings: Settings, spark_available: bool) -> EngineChoice:
    """The engine for a request before any table is measured (connection checks, DDL,
    migrations, describing). With a metastore auto still writes with the embedded engine: only
    the registration of a table (created, renamed, copied, dropped) needs Spark, and the router's
    catalog lease takes it there.
    >>> base_choice(Settings.create("/wh"), True).engine
    'sail'
    >>> base_choice(Settings.create("dbfs:/wh", spark_remote="sc://h:15002"), True).reason
    'the embedded engine cannot reach the warehouse dbfs:/wh: every request runs on the Apache Spark server'
    """
    if settings.engine != AUTO:
        return EngineChoice(settings.engine, f"engine {settings.engine} is configured", False, "configured")
    if not embedded_reaches(settings.warehouse) and spark_available:
        return EngineChoice(SPARK, f"the embedded engine cannot reach the warehouse {settings.warehouse}: every "
                                   f"request runs on the Apache Spark {'server' if settings.spark_remote else 'engine'}",
                            True, "warehouse_unreachable")
    if not spark_available:
        return EngineChoice(SAIL, "no local Apache Spark engine is installed here (no JVM)", True, "no_jvm")
    try:
        SailDialect().check_warehouse_root(settings.warehouse)
    except InvalidRequest:
        return EngineChoice(SPARK, "the warehouse path has characters embedded Sail cannot address", True,
                            "warehouse_path")
    return EngineChoice(SAIL, "embedded Sail serves tables within the memory budget", True)


def upkeep_choice(settings: Settings, spark_available: bool) -> EngineChoice:
    """Compaction, deletion-vector purges and VACUUM: Apache Spark where it can run."""
    base = base_choice(settings, spark_available)
    if base.auto and base.engine == SAIL and spark_available:
        return EngineChoice(SPARK, "table upkeep (OPTIMIZE, REORG, VACUUM) needs Apache Spark", True, "upkeep")
    return base


def merge_estimate(target_bytes: int, source_bytes: int = 0) -> int:
    """Sail's estimated peak for a MERGE (the memory guard's figure)."""
    return SailDialect().merge_memory_estimate(target_bytes, source_bytes)


def merge_choice(base: EngineChoice, spark_available: bool, target_bytes: Optional[int], source_bytes: int,
                 budget: int) -> EngineChoice:
    """Sail, unless its MERGE into a table of `target_bytes` (live Parquet; None = not measured)
    is estimated past the budget and auto may move the request to Spark.
    >>> b = EngineChoice(SAIL, "default", True)
    >>> merge_choice(b, True, 10 * 2**20, 0, 4 * 2**30).engine
    'sail'
    >>> c = merge_choice(b, True, 300 * 2**20, 0, 4 * 2**30)
    >>> c.engine, c.reason
    ('spark', 'the MERGE into 300 MiB of Parquet is estimated at 5.5 GB on Sail, over the memory budget of 4.0 GB')
    >>> merge_choice(b, False, 300 * 2**20, 0, 4 * 2**30).engine
    'sail'
    """
    if not (base.auto and base.engine == SAIL and spark_available) or target_bytes is None:
        return base
    estimate = merge_estimate(target_bytes, source_bytes)
    if estimate <= budget:
        return base
    return EngineChoice(SPARK, f"the MERGE into {target_bytes / 2**20:.0f} MiB of Parquet is estimated at "
                               f"{estimate / 2**30:.1f} GB on Sail, over the memory budget of {budget / 2**30:.1f} GB",
                        True, "merge_over_budget")


def should_prestart(base: EngineChoice, spark_available: bool, target_bytes: Optional[int], budget: int) -> bool:
    """Has a table reached PRESTART_SHARE of the size at which its MERGE moves to Spark (so the
    Spark engine should be started ahead)?
    >>> b = EngineChoice(SAIL, "default", True)
    >>> should_prestart(b, True, 150 * 2**20, 4 * 2**30), should_prestart(b, True, 10 * 2**20, 4 * 2**30)
    (True, False)
    """
    if not (base.auto and base.engine == SAIL and spark_available) or target_bytes is None:
        return False
    moves_at = (budget - merge_estimate(0)) / SailDialect.MERGE_BYTES_PER_TARGET_BYTE
    return target_bytes > PRESTART_SHARE * moves_at


def column_change_choice(base: EngineChoice, spark_available: bool, widens: bool,
                         retypes_widened: bool, maps_columns: bool = False) -> EngineChoice:
    """The engine of an AlterTable that changes column types, when auto opened it on Sail:
    `widens` -- every change is one Delta widens in the log (dialect.delta_widens), which only
    Apache Spark + Delta can commit (Sail 0.7.2 has no ALTER COLUMN ... TYPE and would rewrite every
    file); `retypes_widened` -- a rewrite changes the type of a column Delta widened before, which
    Sail 0.7.2 writes with Delta's type-change record left stale, and then refuses to read
    ("invalid delta.typeChanges metadata"; docs/column-changes.md). Sail reads and writes a widened
    table otherwise, so every other request stays where it was.
    >>> b = EngineChoice(SAIL, "default", True)
    >>> column_change_choice(b, True, True, False).code, column_change_choice(b, True, False, True).code
    ('type_widening', 'widened_retype')
    >>> column_change_choice(b, True, False, False).engine, column_change_choice(b, False, True, False).engine
    ('sail', 'sail')
    >>> column_change_choice(EngineChoice(SAIL, "configured", False), True, True, False).engine
    'sail'

    `maps_columns` -- a rename or drop in place (column mapping, upgraded first where the table lacks
    it: core/tables.py), which Sail 0.7.2 has no statement for; Sail reads and writes the table after.
    >>> column_change_choice(b, True, False, False, maps_columns=True).code
    'column_mapping'
    """
    if not (base.auto and base.engine == SAIL and spark_available):
        return base
    if widens:
        return EngineChoice(SPARK, "a type widening is a metadata commit on Apache Spark + Delta (Sail 0.7.2 would "
                                   "rewrite the table)", True, "type_widening")
    if retypes_widened:
        return EngineChoice(SPARK, "a rewrite changes the type of a column Delta widened, which Sail 0.7.2 cannot "
                                   "read back", True, "widened_retype")
    if maps_columns:
        return EngineChoice(SPARK, "a renamed or dropped column is a metadata commit on Apache Spark + Delta (Sail "
                                   "0.7.2 would rewrite the table)", True, "column_mapping")
    return base
