"""Engine dialects: the one place where Sail and Apache Spark + Delta differ.

The engine session (session.py) speaks portable Spark SQL and DataFrame code;
whenever the engines need different statements (how a table is named in SQL, how columns
are added, how table properties are read, how a big Arrow batch is staged) it asks the
dialect. Methods take the Spark Connect session explicitly.
"""
from __future__ import annotations

import hashlib
import re
from typing import Callable

import pyarrow as pa

from .. import logs
from ..errors import InvalidRequest, UnsupportedOperation
from ..storage import StorageOptions, is_url, store_for
from ..warehouse import Warehouse
from .errors import run_engine
from .shipping import staged_as_parquet, staged_in_chunks
from .statements import (add_columns_sql, alter_column_type_sql, create_table_sql, drop_columns_sql, drop_table_sql,
                         optimize_sql, path_identifier, purge_deletion_vectors_sql, register_table_sql, rename_column_sql,
                         set_properties_sql, show_property_sql, vacuum_sql)

log = logs.get(__name__)

# Delta column mapping modes under which data files name columns by physical names, so a
# rename or drop changes only the schema in the log.
COLUMN_MAPPING = "delta.columnMapping.mode"
MAPPED_MODES = ("name", "id")
# What a table without column mapping gets before its first rename or drop in place (one SET
# TBLPROPERTIES commit on Apache Spark + Delta; existing columns keep their names as physical names,
# so no data file changes). delta-spark 4.4 writes column mapping alone as reader version 2 with no
# reader features (it lowers an asked-for reader 3), which delta-rs 1.6.6's to_pyarrow_table reads
# as all NULLs without an error; with the timestampNtz feature beside it (a reader-3 feature every
# engine here supports, and no column needs) the protocol is reader 3 / writer 7 naming
# columnMapping, which that call refuses loudly instead ("reader features {'columnMapping'} ... not
# yet supported"). Measured 2026-12-02: docs/column-changes.md.
COLUMN_MAPPING_UPGRADE = {
    "delta.feature.timestampNtz": "supported",
    "delta.feature.columnMapping": "supported",
    COLUMN_MAPPING: "name",
}

# How many partitions Spark (and Delta's VACUUM) list files with, and Spark's default.
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
SPARK_DEFAULT_LISTING_PARALLELISM = "10000"

# Delta 4.x type widening (the `typeWidening` table feature, delta-spark 4.4): the type changes a
# metadata commit can make (docs.delta.io "Delta type widening"; the older files keep their type and
# every Delta 4 reader reads them as the new one). Spark SQL type names, as core/types.spark_type
# writes them. Delta also widens BIGINT to DECIMAL(20+, 0); that one is rewritten here: the older
# files' BIGINT statistics would then answer a DECIMAL column, which Sail 0.7.2 reads from file
# statistics parsed as doubles (exact only up to 2**53; docs/engines.md).
DELTA_WIDER_TYPES = {
    "SMALLINT": {"INT", "BIGINT", "DOUBLE"},
    "INT": {"BIGINT", "DOUBLE"},
    "FLOAT": {"DOUBLE"},
    "DATE": {"TIMESTAMP_NTZ"},
}
DELTA_WIDER_INTEGER_DIGITS = {"SMALLINT": 5, "INT": 10}   # a DECIMAL(p, s) holds them when p - s >= this


def delta_widens(old: str, new: str) -> bool:
    """Does Delta widen a column of type `old` to `new` in its log alone?
    >>> delta_widens("INT", "BIGINT"), delta_widens("SMALLINT", "DOUBLE"), delta_widens("DATE", "TIMESTAMP_NTZ")
    (True, True, True)
    >>> delta_widens("DECIMAL(10,2)", "DECIMAL(20,4)"), delta_widens("DECIMAL(10,2)", "DECIMAL(11,4)")
    (True, False)
    >>> delta_widens("INT", "DECIMAL(12,2)"), delta_widens("INT", "DECIMAL(10,2)")
    (True, False)
    >>> delta_widens("BIGINT", "DOUBLE"), delta_widens("BIGINT", "DECIMAL(38,0)"), delta_widens("INT", "STRING")
    (False, False, False)
    >>> delta_widens("BIGINT", "INT"), delta_widens("DATE", "TIMESTAMP"), delta_widens("INT", "INT")
    (False, False, False)
    """
    old, new = old.upper().replace(" ", ""), new.upper().replace(" ", "")
    if new in DELTA_WIDER_TYPES.get(old, ()):
        return True
    target = _decimal(new)
    if target is None:
        return False
    p2, s2 = target
    source = _decimal(old)
    if source is not None:
        p1, s1 = source
        return (p2, s2) != (p1, s1) and s2 >= s1 and p2 - p1 >= s2 - s1
    digits = DELTA_WIDER_INTEGER_DIGITS.get(old)
    return digits is not None and p2 - s2 >= digits


def _decimal(sql_type: str):
    m = re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", sql_type)
    return (int(m.group(1)), int(m.group(2))) if m else None


SPARK_HINT = "; run upkeep with the Apache Spark engine: fivetran-delta-destination maintain --engine spark ..."


class Dialect:
    """What differs between engines. Methods take the Spark Connect session explicitly."""

    name = "?"
    # Session settings this engine needs on every connection (also a remote one).
    session_conf: dict[str, str] = {}
    # Added on a second session of the same engine for small statements (choice.small_statements);
    # empty: the engine has one session per configuration.
    small_statement_conf: dict[str, str] = {}

    # -- where tables can live ---------------------------------------------------------------
    def check_warehouse_root(self, root: str) -> None:
        """Refuse a warehouse root this engine would write somewhere else than asked."""

    def engine_path(self, location: str) -> str:
        """A canonical location (storage.canonical: `/abs`, `s3://b/k`) as this engine spells it."""
        return location

    def storage_conf(self, root: str, options: StorageOptions) -> dict[str, str]:
        """Session settings that let this engine reach the warehouse at `root` with `options`
        (set on the Spark Connect session, never on a command line)."""
        return {}

    # -- naming tables in SQL ---------------------------------------------------------------
    def table_name(self, spark, location: str) -> str:
        """A SQL name for the Delta table at `location`, usable in MERGE/UPDATE/DELETE."""
        raise NotImplementedError

    def schema_changed(self, spark, location: str) -> None:
        """Called after the table's schema changed (or it was moved/dropped)."""

    def create_table(self, spark, location: str, columns_sql: str, properties: dict[str, str]) -> None:
        raise NotImplementedError

    def creation_properties(self) -> dict[str, str]:
        """Delta table features this engine turns on for the tables it creates."""
        return {}

    # -- schema changes -----------------------------------------------------------------------
    def add_columns(self, spark, location: str, columns: list[tuple[str, str]]) -> None:
        """Add (name, SQL type) columns, NULL in every existing row, in one commit."""
        raise NotImplementedError

    def renames_in_place(self, spark, location: str, old: str, new: str) -> bool:
        """Can `rename_column` rename this column of this table without rewriting its data?
        False: the caller rewrites the table (one overwrite commit)."""
        return False

    def drops_in_place(self, spark, location: str, names: list[str]) -> bool:
        """Can `drop_columns` drop these columns of this table without rewriting its data?"""
        return False

    # Can the engine rename and drop columns in the log once a table has column mapping (a table
    # without it upgraded first with COLUMN_MAPPING_UPGRADE)? Sail 0.7.2 has no RENAME/DROP COLUMN.
    maps_columns = False

    # Can the engine change column types in the log only (Delta type widening, for the changes
    # `delta_widens` allows)? Sail 0.7.2 has no ALTER COLUMN ... TYPE: it rewrites the table.
    widens_types_in_place = False

    def widen_columns(self, spark, location: str, columns: list[tuple[str, str]], properties: dict[str, str]) -> None:
        """(name, SQL type) columns widened in the log only, after `properties` (the table features
        the widening needs, when the table lacks them) are set; no data file is added or removed."""
        raise UnsupportedOperation(f"{self.name} cannot change a column's type without rewriting the table")

    def rename_column(self, spark, location: str, old: str, new: str) -> None:
        """A metadata-only rename in one commit (only where `renames_in_place` said so)."""
        raise UnsupportedOperation(f"{self.name} cannot rename a column without rewriting the table")

    def drop_columns(self, spark, location: str, names: list[str]) -> None:
        """A metadata-only drop in one commit (only where `drops_in_place` said so)."""
        raise UnsupportedOperation(f"{self.name} cannot drop columns without rewriting the table")

    # -- table properties -----------------------------------------------------------------------
    def property_values(self, spark, location: str, key: str) -> list[str]:
        """Values the table property `key` has had (at least its current one)."""
        raise NotImplementedError

    # -- table upkeep (core/upkeep.py) ---------------------------------------------------------
    def compact(self, spark, location: str) -> None:
        raise UnsupportedOperation(f"{self.name} cannot compact tables (OPTIMIZE){SPARK_HINT}")

    def purge_deletion_vectors(self, spark, location: str) -> None:
        raise UnsupportedOperation(f"{self.name} cannot purge deletion vectors (REORG TABLE ... APPLY (PURGE)){SPARK_HINT}")

    def vacuum(self, spark, location: str, retention_hours: int) -> None:
        raise UnsupportedOperation(f"{self.name} cannot remove unreferenced files (VACUUM){SPARK_HINT}")

    # -- keyed writes ------------------------------------------------------------------------------
    def probes_keys_before_merge(self, target_bytes: int | None) -> bool:
        """Ask the engine whether any key of a batch is stored before a MERGE into a table of
        `target_bytes` (live Parquet, from the table's snapshot; None: unknown), so that a batch of new keys is a plain
        append? Worth a join over the table's keys only where a MERGE that matches nothing costs
        more than that join (see the dialects)."""
        return True

    # Does the engine's MERGE skip target files by a predicate on the target alone in its ON clause
    # (core/target_files.py)? Where it does not, the predicate is only a cost per row.
    merge_skips_files_by_target_predicate = False
    # From this much live Parquet a table gets deletion vectors before the engine's first rewrite
    # of it (core/write_plan.py deletion_vectors_first): a MERGE then marks the rows it replaces
    # instead of copying every other row of each file it touches. None: never.
    deletion_vectors_from_bytes: int | None = None

    # -- memory ------------------------------------------------------------------------------------
    def merge_memory_estimate(self, target_bytes: int, source_bytes: int) -> int | None:
        """Peak bytes of a process running a MERGE of `source_bytes` (Arrow) into a table of
        `target_bytes` (Parquet, live files); None when the engine's MERGE memory does not grow
        with the target (no guard, core/memory.py)."""
        return None

    # -- shipping Arrow data to the engine ------------------------------------------------------
    def staged(self, spark, warehouse: Warehouse, data: pa.Table):
        """How a batch over LOCAL_RELATION_LIMIT reaches the engine (a context manager yielding a
        view name). Where the destination can write files itself (local disks, S3) pyarrow writes
        the batch as Parquet files the engine reads in parallel: on Sail a 1M-row, 20-column batch
        is staged and inserted in 3.5 s this way against 6.7 s appended in chunks to a staging Delta
        table (docs/performance-analysis.md); on Spark a big local relation would be materialised
        whole in the driver. Elsewhere, chunks to a staging Delta table."""
        if warehouse.can_list:
            return staged_as_parquet(spark, warehouse, data, self.engine_path)
        return staged_in_chunks(spark, warehouse, data, self.engine_path)


# What Sail 0.7.2 takes literally in a local table location (measured: see check_warehouse_root).
SAIL_UNSAFE_ROOT = re.compile(r"[^A-Za-z0-9_\-./+@,:=]")


class SailDialect(Dialect):
    """Embedded (or remote) Sail 0.7.2.

    - `delta.`/path`` identifiers are not accepted: each table location is registered in the
      session catalog under a name derived from its path (an external table: dropping it
      keeps the data). Sail's catalog entry keeps the schema seen at registration and MERGE
      casts to it, so the entry is dropped after every schema change.
    - No ALTER TABLE ADD COLUMNS: columns are added by appending zero rows with mergeSchema.
    - No SHOW TBLPROPERTIES, and the catalog does not load table properties from the Delta
      log: they are read from the log's metaData actions through spark.read.json (plus
      checkpoint Parquet).
    - No chunked cached local relations: batches over LOCAL_RELATION_LIMIT go through a
      private staging Delta table under the warehouse, removed right after.
    """

    name = "sail"

    # Sail 0.7.2's MERGE into a table with deletion vectors writes the replaced rows' positions
    # (numTargetRowsCopied 0) instead of copying every file it touches: a 100-row upsert (50 keys
    # spread over the table) into 2M rows copied 1,950,000 rows and took 14.4 s without them, 0 rows
    # and 2.6 s with them (docs/big-tables.md). Below this size a copy of the touched files is
    # cheap, and the table stays readable by readers without the feature (delta-rs's
    # to_pyarrow_table and pandas through it; docs/readers.md).
    deletion_vectors_from_bytes = 64 * 2**20

    def __init__(self, own_process: bool = False):
        """`own_process`: the session's engine is a process of this destination's (supervised: it is
        never restarted under the session), so a table registered once stays registered for the
        session's life, and is not registered again before every statement."""
        self._registered: set[str] | None = set() if own_process else None

    def engine_path(self, location: str) -> str:
        """Sail reaches stores through object_store: each store's `object_store_path` (Azure's
        `wasbs://` as `abfss://`).
        >>> SailDialect().engine_path("wasbs://c@a.blob.core.windows.net/wh"), SailDialect().engine_path("/wh/t")
        ('abfss://c@a.dfs.core.windows.net/wh', '/wh/t')
        """
        return store_for(location).object_store_path(location)

    def check_warehouse_root(self, root: str) -> None:
        """Sail 0.7.2 percent-encodes some characters of a local table location (space,
        non-ASCII, `~`, `%`, `]`) and reads `[` as a glob: the log and the data files would land
        in differently spelled directories. Schema and table directories are spelled safely by
        the warehouse; the root is the user's, so a root Sail cannot address is refused."""
        if is_url(root):
            return
        bad = sorted(set(SAIL_UNSAFE_ROOT.findall(root)))
        if bad:
            shown = ", ".join(repr(c) for c in bad)
            raise InvalidRequest(
                f"the warehouse path has characters the embedded Sail engine cannot address ({shown}); "
                "use a path of ASCII letters, digits and - _ . / + @ , : = (or the Apache Spark engine: --engine spark)")

    # Sail's MERGE holds the whole target in a hash join whatever it matches (and is refused by
    # the memory guard on big tables): the probe keeps new-key batches out of it. On a small table
    # the MERGE is cheap and the probe is a statement more: measured on a 2,000-row table, a
    # 100-row upsert spent 34 ms in the probe beside 114 ms in the MERGE (of ~190 ms in all).
    PROBE_ABOVE_BYTES = 16 * 2**20

    def probes_keys_before_merge(self, target_bytes: int | None) -> bool:
        """
        >>> SailDialect().probes_keys_before_merge(2**20), SailDialect().probes_keys_before_merge(None)
        (False, True)
        """
        return target_bytes is None or target_bytes >= self.PROBE_ABOVE_BYTES

    # Sail's MERGE hashes the whole target (all columns) as the join's build side, three times
    # over in one plan: measured 1.1 / 2.4 / 4.9 GiB peak RSS at 44 / 147 / 294 MB of target
    # Parquet (bench/engines/sail_merge_memory.py, docs/sail-merge-memory.md), i.e. ~16x the
    # Parquet bytes over ~0.45 GiB. Rounded up: 5-17% above every measurement.
    MERGE_BASE_BYTES = 512 * 2**20
    MERGE_BYTES_PER_TARGET_BYTE = 17
    MERGE_BYTES_PER_SOURCE_BYTE = 4

    def merge_memory_estimate(self, target_bytes: int, source_bytes: int) -> int | None:
        """
        >>> SailDialect().merge_memory_estimate(128 * 2**20, 0) // 2**20
        2688
        """
        return (self.MERGE_BASE_BYTES + self.MERGE_BYTES_PER_TARGET_BYTE * target_bytes
                + self.MERGE_BYTES_PER_SOURCE_BYTE * source_bytes)

    def table_name(self, spark, location: str) -> str:
        ident = _registered_name(location)
        if self._registered is not None and location in self._registered:
            return ident
        # On a remote engine issued every time (a catalog no-op when it exists): a restarted
        # remote engine has lost its session catalog, and a cache here would not know.
        sql = register_table_sql(ident, location)
        run_engine("register table", lambda: spark.sql(sql).collect())
        if self._registered is not None:
            self._registered.add(location)
        return ident

    def schema_changed(self, spark, location: str) -> None:
        ident = _registered_name(location)
        if self._registered is not None:
            self._registered.discard(location)
        run_engine("refresh table", lambda: spark.sql(drop_table_sql(ident)).collect())

    def create_table(self, spark, location: str, columns_sql: str, properties: dict[str, str]) -> None:
        ident = _registered_name(location)
        if self._registered is not None:
            self._registered.discard(location)
        spark.sql(drop_table_sql(ident)).collect()  # a stale entry of a dropped table
        sql = create_table_sql(ident, columns_sql, properties, location=location)
        run_engine("create table", lambda: spark.sql(sql).collect())

    def add_columns(self, spark, location: str, columns: list[tuple[str, str]]) -> None:
        from pyspark.sql import functions as F

        def go():
            base = spark.read.format("delta").load(location)
            empty = base.limit(0).select("*", *[F.lit(None).cast(t).alias(n) for n, t in columns])
            empty.write.format("delta").mode("append").option("mergeSchema", "true").save(location)

        run_engine("add columns", go)
        self.schema_changed(spark, location)

    def property_values(self, spark, location: str, key: str) -> list[str]:
        """Sail 0.7.2 has no SHOW TBLPROPERTIES (nor DESCRIBE DETAIL). Sail reaches only warehouses the
        destination lists itself, whose tables' properties the core reads from the Delta log
        (core/registry.py property_values): it is never asked."""
        raise UnsupportedOperation(f"{self.name} cannot list a table's properties (SHOW TBLPROPERTIES){SPARK_HINT}")


def _registered_name(location: str) -> str:
    return "fivetran_t_" + hashlib.sha1(location.encode("utf-8")).hexdigest()[:24]


class SparkDialect(Dialect):
    """Apache Spark + delta-spark (the local child JVM or any remote Spark Connect server).

    - Tables are named by path (`delta.`/path``): no catalog registration to keep fresh.
    - New tables get deletion vectors (MERGE/UPDATE/DELETE mark rows instead of rewriting
      files) and column mapping by name (any UTF-8 column name; rename and drop column
      are metadata-only). Such tables need readers with those features: Sail 0.7.2 and
      delta-rs read them, and Sail writes them (tests/engines/test_cross_engine.py, docs/column-changes.md).
    - Standard SQL where Spark has it: ALTER TABLE ADD COLUMNS, SHOW TBLPROPERTIES, and on
      tables with column mapping (the table's own `delta.columnMapping.mode`, never assumed: a
      table Sail created gets it at its first rename or drop under `column_changes` = `in_place`,
      COLUMN_MAPPING_UPGRADE) ALTER TABLE RENAME COLUMN / DROP COLUMNS, which change only the log's schema.
    - Batches up to LOCAL_RELATION_LIMIT travel as Spark Connect local relations. A bigger
      one would be materialised whole in the driver (a 1M-row, 20-column batch, 238 MB of
      Arrow, ran a 2 GB driver out of heap): it is staged as Parquet files, as on Sail
      (`Dialect.staged`).
    """

    name = "spark"

    def __init__(self, storage: StorageOptions | None = None):
        # The settings of the session's warehouse: Azure's spelling depends on them (the account
        # of an az:// URL, http for an emulator), so a session is kept per storage configuration.
        self.storage = storage or StorageOptions()

    def engine_path(self, location: str) -> str:
        """A location as Hadoop spells it (each store's `spark_path`: S3A for `s3://`, ABFS for Azure).
        >>> SparkDialect().engine_path("s3://b/wh/t"), SparkDialect().engine_path("/wh/t")
        ('s3a://b/wh/t', '/wh/t')
        >>> SparkDialect().engine_path("wasbs://c@acct.blob.core.windows.net/wh")
        'abfss://c@acct.dfs.core.windows.net/wh'
        """
        return store_for(location).spark_path(location, self.storage)

    def storage_conf(self, root: str, options: StorageOptions) -> dict[str, str]:
        """The warehouse's store's Hadoop settings (S3A's per bucket, so that one engine can serve
        buckets with different credentials); empty options leave Hadoop to its default chain."""
        return store_for(root).hadoop_conf(root, options)

    # Spark writes INT96 timestamps by default; other readers turn them into nanoseconds,
    # which overflow for dates past 2262 (Fivetran's history end is 9999-12-31).
    # MERGE keeps delta-spark's "auto" source materialization: the source is persisted once (DISK_ONLY
    # blocks in the engine's local dirs, private to its process like its shuffle files, which hold the
    # same rows) and read from there by both of MERGE's passes. Without it ("none") the 100k upsert into
    # 1M rows took 31-33 s instead of 22 s (2026-11-28, quiet machine): the shipped batch is decoded twice.
    session_conf = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}
    # A small statement spends about a quarter of its time generating and compiling code (most of it
    # for Delta's log replay, not the rows): interpreted projections cut a warm small WriteBatch from
    # 3.8 to 2.9 s, but make a 1M-row initial load 1.9x slower (26 -> 50 s; docs/performance-analysis.md).
    # So only statements on small tables with small batches get a session with them.
    small_statement_conf = {"spark.sql.codegen.factoryMode": "NO_CODEGEN", "spark.sql.codegen.wholeStage": "false"}

    # delta-spark's MERGE prunes its target by the ON clause's target-only predicates with the Delta
    # log's per-file statistics before it joins (measured: docs/big-tables.md).
    merge_skips_files_by_target_predicate = True
    # On a small table a MERGE with deletion vectors took 6.0 s, without 3.5-4.0 s (125 rows into
    # 2,000, a warm local engine, 2 cores, bench/engines/spark_statements.py).
    deletion_vectors_from_bytes = 8 * 2**20

    def probes_keys_before_merge(self, target_bytes: int | None) -> bool:
        """delta-spark's MERGE finds the touched files first and, when there are none, only writes
        the inserts (no rewrite): a probe before it is the same join twice. Measured on 2 cores,
        100k new keys into 1M rows: probe + append 19.3 s, MERGE alone 9.9 s, its commit all adds."""
        return False

    # Column mapping by name: renames and drops of columns in place. Deletion vectors are turned on
    # per table once it is big enough to gain from them (core/write_plan.py deletion_vectors_first).
    FEATURES = {
        "delta.columnMapping.mode": "name",
    }

    def table_name(self, spark, location: str) -> str:
        return path_identifier(location)

    def create_table(self, spark, location: str, columns_sql: str, properties: dict[str, str]) -> None:
        sql = create_table_sql(path_identifier(location), columns_sql, properties)
        run_engine("create table", lambda: spark.sql(sql).collect())

    def creation_properties(self) -> dict[str, str]:
        return dict(self.FEATURES)

    def add_columns(self, spark, location: str, columns: list[tuple[str, str]]) -> None:
        sql = add_columns_sql(path_identifier(location), columns)
        run_engine("add columns", lambda: spark.sql(sql).collect())

    def column_mapping(self, spark, location: str) -> bool:
        modes = run_engine("read the column mapping mode", lambda: self.property_values(spark, location, COLUMN_MAPPING))
        return bool(modes) and modes[-1] in MAPPED_MODES

    def renames_in_place(self, spark, location: str, old: str, new: str) -> bool:
        # Delta refuses a rename to another case of the same name (FIELD_ALREADY_EXISTS).
        return old.casefold() != new.casefold() and self.column_mapping(spark, location)

    def drops_in_place(self, spark, location: str, names: list[str]) -> bool:
        return bool(names) and self.column_mapping(spark, location)

    maps_columns = True
    widens_types_in_place = True

    def widen_columns(self, spark, location: str, columns: list[tuple[str, str]], properties: dict[str, str]) -> None:
        """One commit setting `properties` (type widening on, and the timestampNtz feature a DATE
        widened to TIMESTAMP_NTZ needs), then one metadata commit per column: Delta's ALTER COLUMN
        changes one column at a time."""
        ident = path_identifier(location)
        if properties:
            run_engine("turn type widening on", lambda: spark.sql(set_properties_sql(ident, properties)).collect())
        for name, sql_type in columns:
            sql = alter_column_type_sql(ident, name, sql_type)
            run_engine("widen a column's type", lambda: spark.sql(sql).collect())

    def rename_column(self, spark, location: str, old: str, new: str) -> None:
        sql = rename_column_sql(path_identifier(location), old, new)
        run_engine("rename column", lambda: spark.sql(sql).collect())

    def drop_columns(self, spark, location: str, names: list[str]) -> None:
        sql = drop_columns_sql(path_identifier(location), names)
        run_engine("drop columns", lambda: spark.sql(sql).collect())

    def compact(self, spark, location: str) -> None:
        spark.sql(optimize_sql(path_identifier(location))).collect()

    def purge_deletion_vectors(self, spark, location: str) -> None:
        spark.sql(purge_deletion_vectors_sql(path_identifier(location))).collect()

    def vacuum(self, spark, location: str, retention_hours: int) -> None:
        # Delta's VACUUM lists the table's files into LISTING_PARALLELISM partitions, Spark's default
        # 10000: 10000 tasks for a table of a few files (measured on 2 busy cores, the shared test JVM:
        # 121 s on a local directory, 227 s on S3; 19 s and 15 s with 4). Unless the engine's operator
        # chose a value, it lists with as many partitions as the engine's shuffles have.
        if spark.conf.get(LISTING_PARALLELISM) == SPARK_DEFAULT_LISTING_PARALLELISM:
            spark.conf.set(LISTING_PARALLELISM, spark.conf.get("spark.sql.shuffle.partitions"))
        spark.sql(vacuum_sql(path_identifier(location), retention_hours)).collect()

    def property_values(self, spark, location: str, key: str) -> list[str]:
        sql = show_property_sql(path_identifier(location), key)
        rows = spark.sql(sql).collect()
        # A missing key answers one row saying so, with the key column holding the key.
        return [r[1] for r in rows if r[0] == key and not str(r[1]).startswith("Table ")]


DIALECTS = {"sail": SailDialect, "spark": SparkDialect}


def dialect_for(engine: str, own_process: bool = False, storage: StorageOptions | None = None) -> Dialect:
    """The dialect of a session of `engine`; `own_process`: its engine is a supervised process of
    this destination (SailDialect remembers its registrations); `storage`: the settings of the
    session's warehouse (the Spark dialect spells Azure locations with them)."""
    if engine == "sail":
        return SailDialect(own_process)
    return SparkDialect(storage) if engine == "spark" else DIALECTS[engine]()
