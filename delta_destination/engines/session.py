"""The engine-session interface: everything the core asks of an engine.

The core never touches Spark Connect objects. It hands this session statements built by
core/sql.py (`execute`, `rows`, `arrow`), Arrow data to use in them (`shipped`), and asks
for table operations by location (`create_table`, `overwrite`, `create_as`, ...) and for
entries in its session catalog by name (`register_entry`, ...: core/catalogs/hive.py). Every
call names its action, runs under the engine's error classification and commit-conflict
retry (errors.run_engine), and leaves engine differences to the dialect.
"""
from __future__ import annotations

import threading
import time
import uuid
from contextlib import ExitStack, contextmanager
from typing import Callable, Iterator, Optional

import pyarrow as pa

from ..warehouse import Warehouse
from .dialect import Dialect
from .errors import run_engine
from .shipping import LOCAL_RELATION_LIMIT, as_local_relation
from .statements import (create_database_sql, describe_extended_sql, drop_table_sql, qualified_name, register_table_sql,
                         set_properties_sql, show_databases_sql, show_tables_sql)


class EngineSession:
    """A Spark Connect session and the dialect of the engine behind it."""

    def __init__(self, spark, dialect: Dialect):
        self.spark = spark          # for the engine layer and scripts; the core does not use it
        self.dialect = dialect
        self._users = 0             # operations holding the session now (in_use)
        self._count_lock = threading.Lock()
        self.last_used = time.monotonic()

    @property
    def busy(self) -> bool:
        return self._users > 0

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def hold(self) -> None:
        """An operation uses the session until `release`: an engine stopped when idle (EnginePool)
        is never stopped under a running request."""
        with self._count_lock:
            self._users += 1

    def release(self) -> None:
        with self._count_lock:
            self._users -= 1
        self.touch()

    @contextmanager
    def in_use(self) -> Iterator["EngineSession"]:
        self.hold()
        try:
            yield self
        finally:
            self.release()

    @property
    def name(self) -> str:
        return self.dialect.name

    # ---- statements ---------------------------------------------------------------------------
    def execute(self, action: str, sql: str, *, attempts: int = 5,
                before_each: Optional[Callable[[], None]] = None) -> None:
        """Run a statement for its effect (a commit, a catalog change). `before_each` runs before
        every attempt, also the retries of a commit conflict (a door's commit guard: a newer
        writer may have won the race that made this attempt fail)."""
        def attempt():
            if before_each is not None:
                before_each()
            self.spark.sql(sql).collect()

        run_engine(action, attempt, attempts=attempts)

    def rows(self, action: str, sql: str) -> list[tuple]:
        """A small result, as tuples (counts, probes, property values)."""
        return [tuple(r) for r in run_engine(action, lambda: self.spark.sql(sql).collect())]

    def arrow(self, action: str, sql: str) -> pa.Table:
        """A result as Arrow (rows the core computes on)."""
        return run_engine(action, lambda: self.spark.sql(sql).toArrow())

    def answers(self) -> None:
        """Raises when the engine does not answer a trivial query."""
        self.spark.sql("SELECT 1").collect()

    @contextmanager
    def shipped(self, data: pa.Table, warehouse: Warehouse) -> Iterator[str]:
        """`data` as a temporary view in the engine; yields the view's name. Up to
        LOCAL_RELATION_LIMIT as one local relation, bigger batches as the dialect stages them
        in the warehouse's private staging area."""
        ship = (self.dialect.staged(self.spark, warehouse, data) if data.nbytes > LOCAL_RELATION_LIMIT
                else as_local_relation(self.spark, data))
        # Shipping is often the request's first engine call: a dead engine must fail it as one
        # (EngineUnavailable, retried by the door), not as an unexpected client exception.
        with ExitStack() as stack:
            view = run_engine("send the batch to the engine", lambda: stack.enter_context(ship), attempts=1)
            yield view

    # ---- tables by location -----------------------------------------------------------------
    def path(self, location: str) -> str:
        """The location as this engine spells it (Apache Spark reads S3 as s3a://)."""
        return self.dialect.engine_path(location)

    def table_name(self, location: str) -> str:
        """A SQL name for the Delta table at `location`, usable in any statement."""
        return self.dialect.table_name(self.spark, self.path(location))

    def columns(self, action: str, location: str) -> list[tuple[str, str]]:
        """(name, Spark type) of the Delta table's columns."""
        fields = run_engine(action, lambda: self.spark.read.format("delta").load(self.path(location)).schema.fields)
        return [(f.name, f.dataType.simpleString()) for f in fields]

    def has_table(self, location: str) -> bool:
        """Is there a Delta table at `location`, as the engine sees it? For storage the
        destination cannot list itself (warehouse.Warehouse.can_list)."""
        try:
            self.spark.read.format("delta").load(self.path(location)).schema
            return True
        except Exception:  # noqa: BLE001 - any failure to load means "no table there"
            return False

    # ---- entries in the engine's session catalog, by name (core/catalogs/hive.py) -------------------
    def register_entry(self, db: str, table: str, location: str) -> None:
        """An external Delta table entry `db.table` at `location` (and its database), both idempotent."""
        self.execute(f"register database {db} in the metastore", create_database_sql(db))
        self.execute(f"register table {db}.{table} in the metastore",
                     register_table_sql(qualified_name(db, table), self.path(location)))

    def drop_entry(self, db: str, table: str) -> None:
        """The entry `db.table` is gone (an external table: its data stays)."""
        self.execute(f"unregister table {db}.{table} from the metastore", drop_table_sql(qualified_name(db, table)))

    def entry_rows(self, db: str, table: str) -> Optional[list[tuple]]:
        """DESCRIBE TABLE EXTENDED of the entry `db.table` (None: there is none)."""
        if not self.rows(f"look for database {db} in the metastore", show_databases_sql(db)):
            return None
        if not self.rows(f"look for table {db}.{table} in the metastore", show_tables_sql(db, table)):
            return None
        return self.rows(f"describe table {db}.{table} of the metastore", describe_extended_sql(qualified_name(db, table)))

    def create_table(self, location: str, columns_sql: str, properties: dict[str, str]) -> None:
        self.dialect.create_table(self.spark, self.path(location), columns_sql, properties)

    def creation_properties(self) -> dict[str, str]:
        """Delta table features this engine turns on for the tables it creates."""
        return self.dialect.creation_properties()

    def set_properties(self, action: str, location: str, props: dict[str, str]) -> None:
        self.execute(action, set_properties_sql(self.table_name(location), props))

    def property_values(self, action: str, location: str, key: str) -> list[str]:
        """Values the table property `key` has had (at least its current one)."""
        return run_engine(action, lambda: self.dialect.property_values(self.spark, self.path(location), key))

    def schema_changed(self, location: str) -> None:
        """After the table's schema changed (or it was moved or dropped)."""
        self.dialect.schema_changed(self.spark, self.path(location))

    def overwrite(self, action: str, location: str, select_sql: str) -> None:
        """The table becomes the query's rows and columns, in ONE overwrite commit."""
        run_engine(action, lambda: self.spark.sql(select_sql).write.format("delta").mode("overwrite")
                   .option("overwriteSchema", "true").save(self.path(location)))

    def create_as(self, action: str, location: str, select_sql: str, properties: dict[str, str]) -> None:
        """A new table at `location` holding the query's rows, its properties and this engine's
        table features, in ONE commit (written through a temporary table name of the engine's session,
        dropped right after; the data stays)."""
        ident = f"fivetran_tmp_{uuid.uuid4().hex}"

        def go():
            writer = self.spark.sql(select_sql).writeTo(ident).using("delta")
            for key, value in {**self.creation_properties(), **properties}.items():
                writer = writer.tableProperty(key, value)
            writer.option("path", self.path(location)).create()

        try:
            run_engine(action, go, attempts=1)
        finally:
            try:
                self.spark.sql(drop_table_sql(ident)).collect()
            except Exception:  # noqa: BLE001 - best effort: the entry is session-local
                pass

    def add_columns(self, location: str, columns: list[tuple[str, str]]) -> None:
        """(name, SQL type) columns, NULL in every existing row, in one commit."""
        self.dialect.add_columns(self.spark, self.path(location), columns)

    def renames_in_place(self, location: str, old: str, new: str) -> bool:
        return self.dialect.renames_in_place(self.spark, self.path(location), old, new)

    def drops_in_place(self, location: str, names: list[str]) -> bool:
        return self.dialect.drops_in_place(self.spark, self.path(location), names)

    @property
    def maps_columns(self) -> bool:
        return self.dialect.maps_columns

    @property
    def widens_types_in_place(self) -> bool:
        return self.dialect.widens_types_in_place

    def widen_columns(self, location: str, columns: list[tuple[str, str]], properties: dict[str, str]) -> None:
        self.dialect.widen_columns(self.spark, self.path(location), columns, properties)

    def rename_column(self, location: str, old: str, new: str) -> None:
        self.dialect.rename_column(self.spark, self.path(location), old, new)

    def drop_columns(self, location: str, names: list[str]) -> None:
        self.dialect.drop_columns(self.spark, self.path(location), names)

    # ---- upkeep -------------------------------------------------------------------------------
    def compact(self, action: str, location: str) -> None:
        run_engine(action, lambda: self.dialect.compact(self.spark, self.path(location)))

    def purge_deletion_vectors(self, action: str, location: str) -> None:
        run_engine(action, lambda: self.dialect.purge_deletion_vectors(self.spark, self.path(location)))

    def vacuum(self, action: str, location: str, retention_hours: int) -> None:
        run_engine(action, lambda: self.dialect.vacuum(self.spark, self.path(location), retention_hours))
