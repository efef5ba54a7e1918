"""Pure builders of the SQL the core runs: no engine, no I/O, exact strings.

Sources of MERGE statements are positional (`s.c<i>` = value of table column i,
`s.u<i>` = "keep the stored value" flag, `s.op` = the row's operation), so customer
column names never collide with ours. Unit tests: tests/unit/test_sql.py.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from .model import Column, DataType, TableSchema  # DataType: the examples
from ..names import quote_ident as q, quote_string
from .types import FLOAT_MAX, spark_type

# Row operations of a change set's merge source (APPEND rows are inserted without a match).
OP_UPSERT, OP_UPDATE, OP_DELETE, OP_APPEND = 0, 1, 2, 4


def column_defs(columns: Iterable[Column]) -> str:
    """
    >>> column_defs([Column("id", DataType.INT), Column("a b", DataType.STRING)])
    '`id` INT, `a b` STRING'
    """
    return ", ".join(f"{q(c.name)} {spark_type(c)}" for c in columns)


def any_row_sql(target: str) -> str:
    """
    >>> any_row_sql("t1")
    'SELECT 1 FROM t1 LIMIT 1'
    """
    return f"SELECT 1 FROM {target} LIMIT 1"


def select_sql(source: str, items: Sequence[str], tail: str = "") -> str:
    """
    >>> select_sql("t1 h", ["h.`a`", "CAST(NULL AS INT) AS `b`"])
    'SELECT h.`a`, CAST(NULL AS INT) AS `b` FROM t1 h'
    """
    return f"SELECT {', '.join(items)} FROM {source}" + (f" {tail}" if tail else "")


def cast_as(expr: str, col: Column) -> str:
    """
    >>> cast_as("`a`", Column("a b", DataType.LONG))
    'CAST(`a` AS BIGINT) AS `a b`'
    """
    return f"CAST({expr} AS {spark_type(col)}) AS {q(col.name)}"


def rewrite_select_sql(source: str, current: TableSchema, target: TableSchema) -> str:
    """The stored rows in `target`'s columns: kept columns as they are, changed types cast,
    new columns NULL (one overwrite commit writes them, ddl.rewrite_columns).
    >>> old = TableSchema("t", (Column("id", DataType.INT), Column("a", DataType.STRING)))
    >>> new = TableSchema("t", (Column("id", DataType.LONG), Column("a", DataType.JSON), Column("n", DataType.NAIVE_DATE)))
    >>> rewrite_select_sql("t1", old, new)
    'SELECT CAST(`id` AS BIGINT) AS `id`, `a`, CAST(NULL AS DATE) AS `n` FROM t1'
    """
    cur = {c.name: c for c in current.columns}
    items = []
    for c in target.columns:
        if c.name not in cur:
            items.append(cast_as("NULL", c))
        elif spark_type(cur[c.name]) == spark_type(c):
            items.append(q(c.name))
        else:
            items.append(cast_as(q(c.name), c))
    return select_sql(source, items)


def recast_select_sql(source: str, columns: Sequence[Column]) -> str:
    """Every column by name, cast to its type (a table's rows taken into another table's types).
    >>> recast_select_sql("t1", [Column("a", DataType.INT)])
    'SELECT CAST(`a` AS INT) AS `a` FROM t1'
    """
    return select_sql(source, [cast_as(q(c.name), c) for c in columns])


def renamed_select_sql(source: str, pairs: Sequence[tuple[str, str]]) -> str:
    """Columns under new names, in order (a rename or a copy as one rewrite).
    >>> renamed_select_sql("t1", [("a", "a"), ("b", "c d")])
    'SELECT `a` AS `a`, `b` AS `c d` FROM t1'
    """
    return select_sql(source, [f"{q(old)} AS {q(new)}" for old, new in pairs])


def add_column_select_sql(source: str, view: str, param: str, columns: Sequence[Column], new: Column) -> str:
    """The stored rows plus a new column holding the one value of `view`'s column `param`.
    >>> add_column_select_sql("t1", "v", "p", [Column("a", DataType.INT)], Column("n", DataType.LONG))
    'SELECT h.`a`, CAST(p.`p` AS BIGINT) AS `n` FROM t1 h CROSS JOIN v p'
    """
    return select_sql(f"{source} h CROSS JOIN {view} p", [f"h.{q(c.name)}" for c in columns] + [cast_as(f"p.{q(param)}", new)])


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
    """
    >>> key_match(TableSchema("t", (Column("id", DataType.INT), Column("name", DataType.STRING))), ["id"])
    't.`id` = s.c0'
    """
    names = table.column_names
    return " AND ".join(f"t.{q(k)} = s.c{names.index(k)}" for k in keys)


def newer_sql(table: TableSchema, columns: Sequence[str]) -> str:
    """The source row is newer than the stored one: columns compared in turn, NULL oldest,
    ties on one column decided by the next; all equal is not newer.
    >>> t = TableSchema("t", (Column("id", DataType.INT), Column("cur", DataType.LONG), Column("at", DataType.LONG)))
    >>> newer_sql(t, ["cur"])
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
              keep_flags: set[int], newer_by: Sequence[str] = (), target_filter: str | None = None) -> str:
    """One MERGE applying upserts, partial updates and deletes; `keep_flags` are the columns
    whose source has a u<i> flag (keep the stored value where it is true). `target_filter`: a
    predicate on the target alone that every row a batch key can match satisfies
    (core/target_files.py), added to the ON clause so that the engine can skip files by it.

    >>> t = TableSchema("t", (Column("id", DataType.INT, primary_key=True), Column("a", DataType.STRING)))
    >>> print(merge_sql("t1", "v", t, ["id"], {0, 2}, set()))  # doctest: +NORMALIZE_WHITESPACE
    MERGE INTO t1 AS t USING v AS s ON t.`id` = s.c0 WHEN MATCHED AND s.op = 2 THEN DELETE
     WHEN MATCHED AND s.op <> 2 THEN UPDATE SET `a` = s.c1
     WHEN NOT MATCHED AND s.op = 0 THEN INSERT (`id`, `a`) VALUES (s.c0, s.c1)
    >>> print(merge_sql("t1", "v", t, ["id"], {2}, set(), target_filter="t.`id` IN (1, 7)"))
    MERGE INTO t1 AS t USING v AS s ON t.`id` = s.c0 AND (t.`id` IN (1, 7)) WHEN MATCHED AND s.op = 2 THEN DELETE
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
    on = key_match(table, keys) + (f" AND ({target_filter})" if target_filter else "")
    return f"MERGE INTO {target} AS t USING {view} AS s ON {on} " + " ".join(clauses)


def insert_clause(table: TableSchema) -> str:
    cols = ", ".join(q(c.name) for c in table.columns)
    vals = ", ".join(value_expr(i, c) for i, c in enumerate(table.columns))
    return f"INSERT ({cols}) VALUES ({vals})"


def insert_sql(target: str, view: str, table: TableSchema, op: int = OP_UPSERT) -> str:
    """The source's rows of one operation as a plain append (no stored key matches).
    Positional: `table` must list the Delta table's columns in their order (the registry's
    describe does). Sail 0.7.2 resolves an INSERT column list case-sensitively against
    lower-cased names and splits names at dots, so `Name` or `a.b` would fail there.
    >>> insert_sql("t1", "v", TableSchema("t", (Column("id", DataType.INT), Column("a", DataType.STRING))))
    'INSERT INTO t1 SELECT s.c0, s.c1 FROM v AS s WHERE s.op = 0'
    """
    vals = ", ".join(value_expr(i, c) for i, c in enumerate(table.columns))
    return f"INSERT INTO {target} SELECT {vals} FROM {view} AS s WHERE s.op = {op}"


def key_probe_sql(target: str, view: str, table: TableSchema, keys: Sequence[str]) -> str:
    """Does any key of the source exist in the table? Reads only the key columns.
    >>> key_probe_sql("t1", "v", TableSchema("t", (Column("id", DataType.INT), Column("a", DataType.INT))), ["id"])
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


def history_current_versions_sql(target: str, keys_view: str, keys: Sequence[str], start: str, active: str,
                                 target_filter: str | None = None) -> str:
    """The stored versions a history batch can touch, for the batch's keys (view columns
    k0..kn, eff): the active one, those at or after eff, and the latest one before eff.
    `target_filter`: as merge_sql's (a predicate on `t` the engine can skip files by)."""
    on = " AND ".join(f"t.{q(k)} = k.k{i}" for i, k in enumerate(keys)) + (f" AND ({target_filter})" if target_filter else "")
    part = ", ".join(f"k.k{i}" for i in range(len(keys)))
    s_, a_ = q(start), q(active)
    return (
        f"SELECT * FROM (SELECT t.*, k.eff AS fivetran_eff_, "
        f"MAX(CASE WHEN t.{s_} < k.eff THEN t.{s_} END) OVER (PARTITION BY {part}) AS fivetran_prev_ "
        f"FROM {target} t JOIN {keys_view} k ON {on}) x "
        f"WHERE x.{a_} = true OR x.{s_} >= x.fivetran_eff_ OR x.{s_} = x.fivetran_prev_"
    )


def history_merge_sql(target: str, view: str, table: TableSchema, keys: Sequence[str], start: str, end: str,
                      active: str, target_filter: str | None = None) -> str:
    """One MERGE of history row actions keyed by (key, start): delete, close (end + inactive),
    replace in place, or insert a new version. `target_filter`: as merge_sql's."""
    names = table.column_names
    idx = {n: i for i, n in enumerate(names)}
    on = " AND ".join(f"t.{q(k)} = s.c{idx[k]}" for k in list(keys) + [start]) + (f" AND ({target_filter})" if target_filter else "")
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
    >>> print(set_all_rows_sql("t1", "v", Column("a", DataType.INT)))  # doctest: +NORMALIZE_WHITESPACE
    MERGE INTO t1 AS t USING v AS s ON true WHEN MATCHED AND NOT (t.`a` <=> CAST(s.v AS INT))
     THEN UPDATE SET `a` = CAST(s.v AS INT)
    """
    c, v = q(column.name), f"CAST(s.v AS {spark_type(column)})"
    return f"MERGE INTO {target} AS t USING {view} AS s ON true WHEN MATCHED AND NOT (t.{c} <=> {v}) THEN UPDATE SET {c} = {v}"


def altered_values_sql(target: str, changes: Sequence[tuple[str, str, str, str]]) -> str:
    """For (column, old type, new type, check): how many stored values the cast would alter
    beyond what the type change asks for. check "exact": a round trip that does not give the
    value back; "range": a finite value that would overflow FLOAT. Under ANSI mode a cast
    that cannot be done at all fails the query instead.
    >>> print(altered_values_sql("t1", [("d", "DECIMAL(20,4)", "DECIMAL(5,1)", "exact")]))  # doctest: +NORMALIZE_WHITESPACE
    SELECT SUM(CASE WHEN `d` IS NOT NULL AND NOT (CAST(CAST(`d` AS DECIMAL(5,1)) AS DECIMAL(20,4)) <=> `d`)
     THEN 1 ELSE 0 END) AS c0 FROM t1
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
    """
    >>> copy_column_sql("t1", "a", "b")
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


def history_add_column_select_sql(target: str, view: str, table: TableSchema, keys: Sequence[str], new: Column,
                                  start: str = "_fivetran_start", end: str = "_fivetran_end",
                                  active: str = "_fivetran_active") -> str:
    """The whole history table with column `new` added (`table` lists it), as
    history_set_column_merge_sql would leave it: active versions that started before the
    view's `ts` are closed at `te` (ts - 1 ms) and continued by a copy starting at ts, active
    until `mx`, holding the view's value `v`; versions starting at ts get the value in place;
    keys that already have a version at ts get no second one. (View columns: ts, te, mx, v.)"""
    s_, a_ = q(start), q(active)
    v = f"CAST(p.v AS {spark_type(new)})"
    open_before = f"h.{a_} = true AND h.{s_} < p.ts AND {v} IS NOT NULL"
    in_place = f"(h.{s_} = p.ts OR (h.{a_} = true AND h.{s_} > p.ts))"

    def row(insert: bool) -> str:
        out = []
        for c in table.columns:
            if c.name == new.name:
                e = v if insert else f"CASE WHEN {in_place} THEN {v} END"
            elif c.name == start and insert:
                e = f"CAST(p.ts AS {spark_type(c)})"
            elif c.name == end:
                e = (f"CAST(p.mx AS {spark_type(c)})" if insert
                     else f"CASE WHEN {open_before} THEN CAST(p.te AS {spark_type(c)}) ELSE h.{q(c.name)} END")
            elif c.name == active:
                e = "true" if insert else f"CASE WHEN {open_before} THEN false ELSE h.{a_} END"
            else:
                e = f"h.{q(c.name)}"
            out.append(f"{e} AS {q(c.name)}")
        return ", ".join(out)

    taken_on = " AND ".join(f"h.{q(k)} = x.{q(k)}" for k in keys)
    return (
        f"SELECT {row(False)} FROM {target} h CROSS JOIN {view} p "
        f"UNION ALL SELECT {row(True)} FROM {target} h CROSS JOIN {view} p "
        f"LEFT ANTI JOIN (SELECT {', '.join('y.' + q(k) for k in keys)} FROM {target} y CROSS JOIN {view} p2 "
        f"WHERE y.{s_} = p2.ts) x ON {taken_on} WHERE {open_before}"
    )


def history_set_column_merge_sql(target: str, view: str, table: TableSchema, keys: Sequence[str], col: Column,
                                 adding: bool, start: str = "_fivetran_start", end: str = "_fivetran_end",
                                 active: str = "_fivetran_active") -> str:
    """One MERGE recording `col := v` (the view's value) as of the view's `ts`:
    - an active version that started before ts and whose value differs is closed
      (active = false, end = te = ts - 1 ms) and a copy starting at ts, active until `mx`,
      gets the value (_fivetran_synced is kept);
    - versions starting exactly at ts get the value in place, so several migrations with
      the same operation_timestamp (or a replay) record history once;
    - an active version starting after ts is refused before (active_after_sql); the
      in-place branch for it only matters for a table changed between that check and here.
    Historical versions are never touched; for an added column (`adding`) they keep NULL."""
    names = table.column_names
    idx = {n: i for i, n in enumerate(names)}
    s_, e_, a_, c_ = q(start), q(end), q(active), q(col.name)
    v = f"CAST(p.v AS {spark_type(col)})"
    differs = f"NOT (h.{c_} <=> {v})"
    close, insert, set_ = 1, 0, 2

    def branch(kind: int) -> str:
        out = []
        for i, c in enumerate(table.columns):
            e = f"h.{q(c.name)}"
            if kind == close and c.name == end:
                e = f"CAST(p.te AS {spark_type(c)})"
            elif kind == close and c.name == active:
                e = "false"
            elif kind == insert and c.name == start:
                e = f"CAST(p.ts AS {spark_type(c)})"
            elif kind == insert and c.name == end:
                e = f"CAST(p.mx AS {spark_type(c)})"
            elif kind == insert and c.name == active:
                e = "true"
            elif kind in (insert, set_) and c.name == col.name:
                e = v
            out.append(f"{e} AS c{i}")
        return ", ".join(out) + f", {kind} AS op"

    open_before = f"h.{a_} = true AND h.{s_} < p.ts AND {differs}"
    at_ts = f"(h.{s_} = p.ts OR (h.{a_} = true AND h.{s_} > p.ts{f' AND h.{c_} IS NULL' if adding else ''}))"
    # keys that already have a version at ts get no second one (it is updated in place)
    taken_on = " AND ".join(f"h.{q(k)} = x.k{i}" for i, k in enumerate(keys)) or "true"
    taken = (f"(SELECT {', '.join(f'y.{q(k)} AS k{i}' for i, k in enumerate(keys)) or '1 AS k'} "
             f"FROM {target} y CROSS JOIN {view} p2 WHERE y.{s_} = p2.ts)")
    source = (
        f"SELECT {branch(close)} FROM {target} h CROSS JOIN {view} p WHERE {open_before} "
        f"UNION ALL SELECT {branch(insert)} FROM {target} h CROSS JOIN {view} p LEFT ANTI JOIN {taken} x ON {taken_on} "
        f"WHERE {open_before} "
        f"UNION ALL SELECT {branch(set_)} FROM {target} h CROSS JOIN {view} p WHERE {at_ts} AND {differs}"
    )
    on = " AND ".join(f"t.{q(k)} = s.c{idx[k]}" for k in list(keys) + [start])
    cols = ", ".join(q(n) for n in names)
    vals = ", ".join(f"s.c{i}" for i in range(len(names)))
    return (
        f"MERGE INTO {target} AS t USING ({source}) AS s ON {on} "
        f"WHEN MATCHED AND s.op = {close} THEN UPDATE SET {a_} = false, {e_} = s.c{idx[end]} "
        f"WHEN MATCHED AND s.op = {set_} THEN UPDATE SET {c_} = s.c{idx[col.name]} "
        f"WHEN NOT MATCHED AND s.op = {insert} THEN INSERT ({cols}) VALUES ({vals})"
    )


def max_sql(target: str, column: str) -> str:
    """
    >>> max_sql("t1", "_fivetran_synced")
    'SELECT MAX(`_fivetran_synced`) AS m FROM t1'
    """
    return f"SELECT MAX({q(column)}) AS m FROM {target}"


def to_history_select_sql(source: str, view: str, kept: Sequence[Column], soft: str | None,
                          start: str = "_fivetran_start", end: str = "_fivetran_end",
                          active: str = "_fivetran_active") -> str:
    """A live table's rows as history versions (view columns st, ep, mx: the start of live rows,
    the epoch, the maximum end): soft-deleted rows (column `soft`, when given) start and end at
    the epoch, inactive; the others start at st, end at mx, active.
    >>> print(to_history_select_sql("t1", "v", [Column("id", DataType.INT)], None))  # doctest: +NORMALIZE_WHITESPACE
    SELECT h.`id`, CAST(CASE WHEN false THEN p.ep ELSE p.st END AS TIMESTAMP) AS `_fivetran_start`,
     CAST(CASE WHEN false THEN p.ep ELSE p.mx END AS TIMESTAMP) AS `_fivetran_end`,
     NOT false AS `_fivetran_active` FROM t1 h CROSS JOIN v p
    """
    deleted = f"COALESCE(h.{q(soft)}, false)" if soft else "false"
    items = [f"h.{q(c.name)}" for c in kept] + [
        f"CAST(CASE WHEN {deleted} THEN p.ep ELSE p.st END AS TIMESTAMP) AS {q(start)}",
        f"CAST(CASE WHEN {deleted} THEN p.ep ELSE p.mx END AS TIMESTAMP) AS {q(end)}",
        f"NOT {deleted} AS {q(active)}",
    ]
    return select_sql(f"{source} h CROSS JOIN {view} p", items)


def latest_versions_select_sql(source: str, keys: Sequence[str], columns: Sequence[str], soft: str,
                               drop_inactive: bool, rank: str, start: str = "_fivetran_start",
                               active: str = "_fivetran_active") -> str:
    """Each key's latest version (greatest start) with `soft` := NOT active, in `columns`' order;
    keys whose latest version is inactive left out when `drop_inactive`.
    >>> print(latest_versions_select_sql("t1", ["id"], ["id", "_fivetran_deleted"], "_fivetran_deleted", False,
    ...                                  "rn"))  # doctest: +NORMALIZE_WHITESPACE
    SELECT x.`id`, COALESCE(NOT x.`_fivetran_active`, false) AS `_fivetran_deleted` FROM (SELECT *,
     ROW_NUMBER() OVER (PARTITION BY `id` ORDER BY `_fivetran_start` DESC) AS rn FROM t1) x WHERE x.rn = 1
    """
    items = [f"COALESCE(NOT x.{q(active)}, false) AS {q(c)}" if c == soft else f"x.{q(c)}" for c in columns]
    ranked = (f"(SELECT *, ROW_NUMBER() OVER (PARTITION BY {', '.join(q(k) for k in keys)} "
              f"ORDER BY {q(start)} DESC) AS {rank} FROM {source}) x")
    where = f"WHERE x.{rank} = 1" + (f" AND x.{q(active)} = true" if drop_inactive else "")
    return select_sql(ranked, items, where)


def probe_insert_sql(target: str) -> str:
    """
    >>> probe_insert_sql("t1")
    'INSERT INTO t1 VALUES (1)'
    """
    return f"INSERT INTO {target} VALUES (1)"
