"""Pure builders of the statements that name, create, register and describe tables: the engine
layer's own (naming tables, creating them, their properties, metadata-only column changes and
upkeep) and entries in the engine's session catalog (EngineSession.register_entry, for
core/catalogs/hive.py). No engine, no I/O, exact strings (unit tests: tests/unit/test_sql.py).
The core's own statements (MERGE, INSERT, history, migrations) are built in core/sql.py.
"""
from __future__ import annotations

from typing import Sequence

from ..names import quote_ident as q, quote_string


def properties_sql(props: dict[str, str]) -> str:
    """
    >>> properties_sql({"a.b": "1"})
    "'a.b' = '1'"
    """
    return ", ".join(f"{quote_string(k)} = {quote_string(v)}" for k, v in props.items())


def path_identifier(location: str) -> str:
    """`delta.`/path`` — a path-based Delta table name in Spark SQL.

    >>> path_identifier("/wh/s/t")
    'delta.`/wh/s/t`'
    """
    return "delta." + q(location)


def create_table_sql(ident: str, columns_sql: str, properties: dict[str, str], location: str | None = None) -> str:
    """
    >>> create_table_sql("delta.`/wh/s/t`", "`id` INT", {"a": "1"})
    "CREATE TABLE delta.`/wh/s/t` (`id` INT) USING delta TBLPROPERTIES ('a' = '1')"
    >>> create_table_sql("t_1", "`id` INT", {}, location="/wh/s/t")
    "CREATE TABLE t_1 (`id` INT) USING delta LOCATION '/wh/s/t'"
    """
    sql = f"CREATE TABLE {ident} ({columns_sql}) USING delta"
    if location is not None:
        sql += f" LOCATION {quote_string(location)}"
    if properties:
        sql += f" TBLPROPERTIES ({properties_sql(properties)})"
    return sql


def qualified_name(db: str, table: str) -> str:
    """A table's name in a database of the session catalog.
    >>> qualified_name("sales", "orders")
    '`sales`.`orders`'
    >>> register_table_sql(qualified_name("sales", "orders"), "s3a://b/wh/sales/orders")
    "CREATE TABLE IF NOT EXISTS `sales`.`orders` USING delta LOCATION 's3a://b/wh/sales/orders'"
    >>> drop_table_sql(qualified_name("sales", "orders"))
    'DROP TABLE IF EXISTS `sales`.`orders`'
    """
    return f"{q(db)}.{q(table)}"


def register_table_sql(ident: str, location: str) -> str:
    """A catalog entry for the Delta table at `location` (external: dropping it keeps the data).
    >>> register_table_sql("t_1", "/wh/s/t")
    "CREATE TABLE IF NOT EXISTS t_1 USING delta LOCATION '/wh/s/t'"
    """
    return f"CREATE TABLE IF NOT EXISTS {ident} USING delta LOCATION {quote_string(location)}"


def drop_table_sql(ident: str) -> str:
    """
    >>> drop_table_sql("t_1")
    'DROP TABLE IF EXISTS t_1'
    """
    return f"DROP TABLE IF EXISTS {ident}"


def create_database_sql(db: str) -> str:
    """
    >>> create_database_sql("sales")
    'CREATE DATABASE IF NOT EXISTS `sales`'
    """
    return f"CREATE DATABASE IF NOT EXISTS {q(db)}"


def show_databases_sql(db: str) -> str:
    """The databases named `db` (a name of letters, digits and `_`: no pattern character).
    >>> show_databases_sql("sales")
    "SHOW DATABASES LIKE 'sales'"
    """
    return f"SHOW DATABASES LIKE {quote_string(db)}"


def show_tables_sql(db: str, table: str) -> str:
    """
    >>> show_tables_sql("sales", "orders")
    "SHOW TABLES IN `sales` LIKE 'orders'"
    """
    return f"SHOW TABLES IN {q(db)} LIKE {quote_string(table)}"


def describe_extended_sql(ident: str) -> str:
    """
    >>> describe_extended_sql("`sales`.`orders`")
    'DESCRIBE TABLE EXTENDED `sales`.`orders`'
    """
    return f"DESCRIBE TABLE EXTENDED {ident}"


def set_properties_sql(ident: str, props: dict[str, str]) -> str:
    """
    >>> set_properties_sql("t_1", {"a": "x'y"})
    "ALTER TABLE t_1 SET TBLPROPERTIES ('a' = 'x\\\\'y')"
    """
    return f"ALTER TABLE {ident} SET TBLPROPERTIES ({properties_sql(props)})"


def show_property_sql(ident: str, key: str) -> str:
    """
    >>> show_property_sql("delta.`/wh/s/t`", "fivetran.schema")
    "SHOW TBLPROPERTIES delta.`/wh/s/t` ('fivetran.schema')"
    """
    return f"SHOW TBLPROPERTIES {ident} ({quote_string(key)})"


def add_columns_sql(ident: str, columns: list[tuple[str, str]]) -> str:
    """
    >>> add_columns_sql("delta.`/wh/s/t`", [("a b", "INT"), ("c", "STRING")])
    'ALTER TABLE delta.`/wh/s/t` ADD COLUMNS (`a b` INT, `c` STRING)'
    """
    cols = ", ".join(f"{q(n)} {t}" for n, t in columns)
    return f"ALTER TABLE {ident} ADD COLUMNS ({cols})"


def rename_column_sql(ident: str, old: str, new: str) -> str:
    """Metadata-only on a Delta table with column mapping (the data files keep their
    physical column names).
    >>> rename_column_sql("delta.`/wh/s/t`", "a b", "new `name` é")
    'ALTER TABLE delta.`/wh/s/t` RENAME COLUMN `a b` TO `new ``name`` é`'
    """
    return f"ALTER TABLE {ident} RENAME COLUMN {q(old)} TO {q(new)}"


def drop_columns_sql(ident: str, names: Sequence[str]) -> str:
    """Metadata-only on a Delta table with column mapping (the values stay in the data
    files, unreferenced, until those files are rewritten and vacuumed).
    >>> drop_columns_sql("delta.`/wh/s/t`", ["a b", "c=d"])
    'ALTER TABLE delta.`/wh/s/t` DROP COLUMNS (`a b`, `c=d`)'
    """
    return f"ALTER TABLE {ident} DROP COLUMNS ({', '.join(q(n) for n in names)})"


def alter_column_type_sql(ident: str, name: str, sql_type: str) -> str:
    """Metadata-only on a Delta table with type widening, for a change Delta widens (the older
    files keep their type and are read as the new one).
    >>> alter_column_type_sql("delta.`/wh/s/t`", "a b", "BIGINT")
    'ALTER TABLE delta.`/wh/s/t` ALTER COLUMN `a b` TYPE BIGINT'
    """
    return f"ALTER TABLE {ident} ALTER COLUMN {q(name)} TYPE {sql_type}"


def optimize_sql(ident: str) -> str:
    """
    >>> optimize_sql("delta.`/wh/s/t`")
    'OPTIMIZE delta.`/wh/s/t`'
    """
    return f"OPTIMIZE {ident}"


def purge_deletion_vectors_sql(ident: str) -> str:
    """Rewrites only the files that carry deletion vectors.
    >>> purge_deletion_vectors_sql("delta.`/wh/s/t`")
    'REORG TABLE delta.`/wh/s/t` APPLY (PURGE)'
    """
    return f"REORG TABLE {ident} APPLY (PURGE)"


def vacuum_sql(ident: str, retention_hours: int) -> str:
    """
    >>> vacuum_sql("delta.`/wh/s/t`", 168)
    'VACUUM delta.`/wh/s/t` RETAIN 168 HOURS'
    """
    return f"VACUUM {ident} RETAIN {int(retention_hours)} HOURS"
