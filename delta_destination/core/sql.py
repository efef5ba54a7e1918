"""Pure builders of the SQL the core runs: no engine, no I/O, exact strings.

Sources of MERGE statements are positional (`s.c<i>` = value of table column i,
`s.u<i>` = "keep the stored value" flag, `s.op` = the row's operation), so customer
column names never collide with ours. Unit tests: tests/test_sql.py.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from .model import Column, TableSchema
from .names import quote_ident as q, quote_string
from .types import FLOAT_MAX, spark_type

# Row operations of a change set's merge source (APPEND rows are inserted without a match).
OP_UPSERT, OP_UPDATE, OP_DELETE, OP_APPEND = 0, 1, 2, 4


def properties_sql(props: dict[str, str]) -> str:
    """>>> properties_sql({"a.b": "1"})
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
    """>>> create_table_sql("delta.`/wh/s/t`", "`id` INT", {"a": "1"})
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


def add_columns_sql(ident: str, columns: list[tuple[str, str]]) -> str:
    """>>> add_columns_sql("delta.`/wh/s/t`", [("a b", "INT"), ("c", "STRING")])
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


def optimize_sql(ident: str) -> str:
    """>>> optimize_sql("delta.`/wh/s/t`")
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
    """>>> vacuum_sql("delta.`/wh/s/t`", 168)
    'VACUUM delta.`/wh/s/t` RETAIN 168 HOURS'
    """
    return f"VACUUM {ident} RETAIN {int(retention_hours)} HOURS"


def column_defs(columns: Iterable[Column]) -> str:
    """>>> column_defs([Column("id", DataType.INT), Column("a b", DataType.STRING)])
    '`id` INT, `a b` STRING'
    """
    return ", ".join(f"{q(c.name)} {spark_type(c)}" for c in columns)


def value_expr(i: int, col: Column, alias: str = "s") -> str:
    """The source value of table column i. Arrow's naive timestamps arrive as TIMESTAMP;
    the cast is exact in a UTC session.
    >>> value_expr(3, Column("t", DataType.NAIVE_DATETIME))
    'CAST(s.c3 AS TIMESTAMP_NTZ)'
    """
    expr = f"{alias}.c{i}"
    if spark_type(col) == "TIMESTAMP_NTZ":
        expr = f"CAST({expr} AS TIMESTAMP_NTZ)"
    return expr


def key_match(table: TableSchema, keys: Sequence[str]) -> str:
    """>>> key_match(<id, name>, ["id"])
    't.`id` = s.c0'
    """
    names = table.column_names
    return " AND ".join(f"t.{q(k)} = s.c{names.index(k)}" for k in keys)


def newer_sql(table: TableSchema, columns: Sequence[str]) -> str:
    """The source row is newer than the stored one: columns compared in turn, NULL oldest,
    ties on one column decided by the next; all equal is not newer.
    >>> newer_sql(<id, cur, at>, ["cur"])
    '(s.c1 > t.`cur` OR (s.c1 IS NOT NULL AND t.`cur` IS NULL))'
    """
    names = table.column_names
    terms, equal_so_far = [], []
    for c in columns:
        sv, tv = f"s.c{names.index(c)}", f"t.{q(c)}"
        gt = f"({sv} > {tv} OR ({sv} IS NOT NULL AND {tv} IS NULL))"
        terms.append(" AND ".join(equal_so_far + [gt]) if equal_so_far else gt)
        equal_so_far.append(f"{sv} <=> {tv}")
    if len(terms) == 1:
        return terms[0]
    return "(" + " OR ".join(f"({t})" for t in terms) + ")"


def merge_sql(target: str, view: str, table: TableSchema, keys: Sequence[str], ops: set[int],
              keep_flags: set[int], newer_by: Sequence[str] = ()) -> str:
    """One MERGE applying upserts, partial updates and deletes; `keep_flags` are the columns
    whose source has a u<i> flag (keep the stored value where it is true).

    >>> merge_sql("t1", "v", <id pk, a>, ["id"], {0, 2}, set())
    'MERGE INTO t1 AS t USING v AS s ON t.`id` = s.c0 WHEN MATCHED AND s.op = 2 THEN DELETE
     WHEN MATCHED AND s.op <> 2 THEN UPDATE SET `a` = s.c1
     WHEN NOT MATCHED AND s.op = 0 THEN INSERT (`id`, `a`) VALUES (s.c0, s.c1)'   (one line)
    """
    sets = []
    for i, c in enumerate(table.columns):
        if c.name in keys:
            continue
        if i in keep_flags:
            sets.append(f"{q(c.name)} = CASE WHEN s.u{i} THEN t.{q(c.name)} ELSE {value_expr(i, c)} END")
        else:
            sets.append(f"{q(c.name)} = {value_expr(i, c)}")
    newer = f" AND {newer_sql(table, newer_by)}" if newer_by else ""
    clauses = []
    if OP_DELETE in ops:
        clauses.append(f"WHEN MATCHED AND s.op = {OP_DELETE}{newer} THEN DELETE")
    if (OP_UPSERT in ops or OP_UPDATE in ops) and sets:
        clauses.append(f"WHEN MATCHED AND s.op <> {OP_DELETE}{newer} THEN UPDATE SET " + ", ".join(sets))
    if OP_UPSERT in ops:
        clauses.append(f"WHEN NOT MATCHED AND s.op = {OP_UPSERT} THEN {insert_clause(table)}")
    if not clauses:
        return ""
    return f"MERGE INTO {target} AS t USING {view} AS s ON {key_match(table, keys)} " + " ".join(clauses)


def insert_clause(table: TableSchema) -> str:
    cols = ", ".join(q(c.name) for c in table.columns)
    vals = ", ".join(value_expr(i, c) for i, c in enumerate(table.columns))
    return f"INSERT ({cols}) VALUES ({vals})"


def insert_sql(target: str, view: str, table: TableSchema, op: int = OP_UPSERT) -> str:
    """The source's rows of one operation as a plain append (no stored key matches).
    Positional: `table` must list the Delta table's columns in their order (the catalog's
    describe does). Sail 0.7.2 resolves an INSERT column list case-sensitively against
    lower-cased names and splits names at dots, so `Name` or `a.b` would fail there.
    >>> insert_sql("t1", "v", <id, a>)
    'INSERT INTO t1 SELECT s.c0, s.c1 FROM v AS s WHERE s.op = 0'
    """
    vals = ", ".join(value_expr(i, c) for i, c in enumerate(table.columns))
    return f"INSERT INTO {target} SELECT {vals} FROM {view} AS s WHERE s.op = {op}"


def key_probe_sql(target: str, view: str, table: TableSchema, keys: Sequence[str]) -> str:
    """Does any key of the source exist in the table? Reads only the key columns.
    >>> key_probe_sql("t1", "v", <id, a>, ["id"])
    'SELECT 1 FROM t1 t JOIN v s ON t.`id` = s.c0 LIMIT 1'
    """
    return f"SELECT 1 FROM {target} t JOIN {view} s ON {key_match(table, keys)} LIMIT 1"


def truncate_sql(target: str, synced_column: str, before_utc_ms: str, soft_column: str | None) -> str:
    """Rows synced before a millisecond UTC instant: deleted, or marked soft-deleted.
    >>> truncate_sql("t1", "_fivetran_synced", "2024-01-02T03:04:05.678Z", None)
    "DELETE FROM t1 WHERE `_fivetran_synced` < CAST('2024-01-02T03:04:05.678Z' AS TIMESTAMP)"
    """
    cut = f"CAST({quote_string(before_utc_ms)} AS TIMESTAMP)"
    if soft_column is None:
        return f"DELETE FROM {target} WHERE {q(synced_column)} < {cut}"
    d = q(soft_column)
    return f"UPDATE {target} SET {d} = true WHERE {q(synced_column)} < {cut} AND ({d} IS NULL OR {d} = false)"


def delete_outside_sql(target: str, column: str, below: int | None = None, at_or_above: int | None = None) -> str:
    """Rows whose integer column is below `below`, at or above `at_or_above`, or NULL.
    >>> delete_outside_sql("t1", "g", below=3)
    'DELETE FROM t1 WHERE `g` IS NULL OR `g` < 3'
    >>> delete_outside_sql("t1", "g", at_or_above=7)
    'DELETE FROM t1 WHERE `g` IS NULL OR `g` >= 7'
    """
    c = q(column)
    terms = [f"{c} IS NULL"]
    if below is not None:
        terms.append(f"{c} < {int(below)}")
    if at_or_above is not None:
        terms.append(f"{c} >= {int(at_or_above)}")
    return f"DELETE FROM {target} WHERE " + " OR ".join(terms)


# ---- history mode -------------------------------------------------------------------------
H_UPSERT, H_CLOSE, H_DELETE = 0, 1, 2


def history_current_versions_sql(target: str, keys_view: str, keys: Sequence[str], start: str, active: str) -> str:
    """The stored versions a history batch can touch, for the batch's keys (view columns
    k0..kn, eff): the active one, those at or after eff, and the latest one before eff."""
    on = " AND ".join(f"t.{q(k)} = k.k{i}" for i, k in enumerate(keys))
    part = ", ".join(f"k.k{i}" for i in range(len(keys)))
    s_, a_ = q(start), q(active)
    return (
        f"SELECT * FROM (SELECT t.*, k.eff AS fivetran_eff_, "
        f"MAX(CASE WHEN t.{s_} < k.eff THEN t.{s_} END) OVER (PARTITION BY {part}) AS fivetran_prev_ "
        f"FROM {target} t JOIN {keys_view} k ON {on}) x "
        f"WHERE x.{a_} = true OR x.{s_} >= x.fivetran_eff_ OR x.{s_} = x.fivetran_prev_"
    )


def history_merge_sql(target: str, view: str, table: TableSchema, keys: Sequence[str], start: str, end: str,
                      active: str) -> str:
    """One MERGE of history row actions keyed by (key, start): delete, close (end + inactive),
    replace in place, or insert a new version."""
    names = table.column_names
    idx = {n: i for i, n in enumerate(names)}
    on = " AND ".join(f"t.{q(k)} = s.c{idx[k]}" for k in list(keys) + [start])
    sets = ", ".join(f"{q(c.name)} = {value_expr(i, c)}" for i, c in enumerate(table.columns)
                     if c.name not in keys and c.name != start)
    close = f"{q(active)} = false, {q(end)} = s.c{idx[end]}"
    return (
        f"MERGE INTO {target} AS t USING {view} AS s ON {on} "
        f"WHEN MATCHED AND s.op = {H_DELETE} THEN DELETE "
        f"WHEN MATCHED AND s.op = {H_CLOSE} THEN UPDATE SET {close} "
        + (f"WHEN MATCHED AND s.op = {H_UPSERT} THEN UPDATE SET {sets} " if sets else "")
        + f"WHEN NOT MATCHED AND s.op = {H_UPSERT} THEN {insert_clause(table)}"
    )


def set_all_rows_sql(target: str, view: str, column: Column) -> str:
    """column := the one value in the view's column v, on every row whose value differs.
    >>> set_all_rows_sql("t1", "v", Column("a", DataType.INT))
    'MERGE INTO t1 AS t USING v AS s ON true WHEN MATCHED AND NOT (t.`a` <=> CAST(s.v AS INT))
     THEN UPDATE SET `a` = CAST(s.v AS INT)'   (one line)
    """
    c, v = q(column.name), f"CAST(s.v AS {spark_type(column)})"
    return f"MERGE INTO {target} AS t USING {view} AS s ON true WHEN MATCHED AND NOT (t.{c} <=> {v}) THEN UPDATE SET {c} = {v}"


def altered_values_sql(target: str, changes: Sequence[tuple[str, str, str, str]]) -> str:
    """For (column, old type, new type, check): how many stored values the cast would alter
    beyond what the type change asks for. check "exact": a round trip that does not give the
    value back; "range": a finite value that would overflow FLOAT. Under ANSI mode a cast
    that cannot be done at all fails the query instead.
    >>> altered_values_sql("t1", [("d", "DECIMAL(20,4)", "DECIMAL(5,1)", "exact")])
    'SELECT SUM(CASE WHEN `d` IS NOT NULL AND NOT (CAST(CAST(`d` AS DECIMAL(5,1)) AS DECIMAL(20,4)) <=> `d`)
     THEN 1 ELSE 0 END) AS c0 FROM t1'   (one line)
    """
    sums = []
    for i, (c, old, new, check) in enumerate(changes):
        if check == "range":
            bad = (f"{q(c)} IS NOT NULL AND ABS(CAST({q(c)} AS DOUBLE)) > {FLOAT_MAX!r} "
                   f"AND ABS(CAST({q(c)} AS DOUBLE)) < CAST('Infinity' AS DOUBLE)")
        else:
            bad = f"{q(c)} IS NOT NULL AND NOT (CAST(CAST({q(c)} AS {new}) AS {old}) <=> {q(c)})"
        sums.append(f"SUM(CASE WHEN {bad} THEN 1 ELSE 0 END) AS c{i}")
    return f"SELECT {', '.join(sums)} FROM {target}"


def copy_column_sql(target: str, from_column: str, to_column: str) -> str:
    """>>> copy_column_sql("t1", "a", "b")
    'UPDATE t1 SET `b` = `a` WHERE NOT (`b` <=> `a`)'
    """
    f, t = q(from_column), q(to_column)
    return f"UPDATE {target} SET {t} = {f} WHERE NOT ({t} <=> {f})"


def active_after_sql(target: str, start: str, active: str, ts_utc: str) -> str:
    """How many active versions start after a UTC instant (history-mode column migrations
    require none: the guide's max(_fivetran_start) <= operation_timestamp).
    >>> active_after_sql("t1", "_fivetran_start", "_fivetran_active", "2005-05-28T20:57:00.000000Z")
    "SELECT COUNT(*) AS n FROM t1 WHERE `_fivetran_active` = true AND `_fivetran_start` > CAST('2005-05-28T20:57:00.000000Z' AS TIMESTAMP)"
    """
    return (f"SELECT COUNT(*) AS n FROM {target} WHERE {q(active)} = true "
            f"AND {q(start)} > CAST({quote_string(ts_utc)} AS TIMESTAMP)")
