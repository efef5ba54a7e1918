"""The core's SQL builders are pure: exact strings, no engine."""
from __future__ import annotations

from delta_destination.core import sql
from delta_destination.core.model import Column, DataType as T, TableSchema
from delta_destination.engines import statements

TABLE = TableSchema("orders", (
    Column("id", T.INT, primary_key=True),
    Column("a b", T.STRING),
    Column("ts", T.NAIVE_DATETIME),
))


def test_properties_and_column_defs():
    assert statements.properties_sql({"fivetran.schema": "{\"a\":'x'}", "k": "v"}) == \
        "'fivetran.schema' = '{\"a\":\\'x\\'}', 'k' = 'v'"
    assert sql.column_defs(TABLE.columns) == "`id` INT, `a b` STRING, `ts` TIMESTAMP_NTZ"
    assert sql.column_defs([Column("we`ird", T.DECIMAL, precision=20, scale=3)]) == "`we``ird` DECIMAL(20,3)"


def test_merge_with_every_operation_and_keep_flags():
    got = sql.merge_sql("tgt", "src", TABLE, ["id"], {0, 1, 2}, {1})
    assert got == (
        "MERGE INTO tgt AS t USING src AS s ON t.`id` = s.c0 "
        "WHEN MATCHED AND s.op = 2 THEN DELETE "
        "WHEN MATCHED AND s.op <> 2 THEN UPDATE SET `a b` = CASE WHEN s.u1 THEN t.`a b` ELSE s.c1 END, "
        "`ts` = CAST(s.c2 AS TIMESTAMP_NTZ) "
        "WHEN NOT MATCHED AND s.op = 0 THEN INSERT (`id`, `a b`, `ts`) VALUES (s.c0, s.c1, CAST(s.c2 AS TIMESTAMP_NTZ))"
    )


def test_merge_clauses_follow_the_operations_present():
    assert sql.merge_sql("tgt", "src", TABLE, ["id"], {2}, set()) == \
        "MERGE INTO tgt AS t USING src AS s ON t.`id` = s.c0 WHEN MATCHED AND s.op = 2 THEN DELETE"
    only_update = sql.merge_sql("tgt", "src", TABLE, ["id"], {1}, set())
    assert "INSERT" not in only_update and "DELETE" not in only_update
    keys_only = TableSchema("k", (Column("id", T.INT, primary_key=True),))
    assert sql.merge_sql("tgt", "src", keys_only, ["id"], {1}, set()) == ""


def test_insert_probe_and_truncate():
    assert sql.insert_sql("tgt", "src", TABLE) == \
        "INSERT INTO tgt SELECT s.c0, s.c1, CAST(s.c2 AS TIMESTAMP_NTZ) FROM src AS s WHERE s.op = 0"
    assert sql.key_probe_sql("tgt", "src", TABLE, ["id", "a b"]) == \
        "SELECT 1 FROM tgt t JOIN src s ON t.`id` = s.c0 AND t.`a b` = s.c1 LIMIT 1"
    assert sql.truncate_sql("tgt", "_fivetran_synced", "2024-01-02T03:04:05.678Z", None) == \
        "DELETE FROM tgt WHERE `_fivetran_synced` < CAST('2024-01-02T03:04:05.678Z' AS TIMESTAMP)"
    assert sql.truncate_sql("tgt", "_fivetran_synced", "2024-01-02T03:04:05.678Z", "_fivetran_deleted") == (
        "UPDATE tgt SET `_fivetran_deleted` = true WHERE `_fivetran_synced` < "
        "CAST('2024-01-02T03:04:05.678Z' AS TIMESTAMP) AND (`_fivetran_deleted` IS NULL OR `_fivetran_deleted` = false)")


def test_history_statements():
    hist = TableSchema("h", (
        Column("id", T.INT, primary_key=True),
        Column("v", T.STRING),
        Column("_fivetran_start", T.UTC_DATETIME, primary_key=True),
        Column("_fivetran_end", T.UTC_DATETIME),
        Column("_fivetran_active", T.BOOLEAN),
    ))
    assert sql.history_merge_sql("tgt", "src", hist, ["id"], "_fivetran_start", "_fivetran_end", "_fivetran_active") == (
        "MERGE INTO tgt AS t USING src AS s ON t.`id` = s.c0 AND t.`_fivetran_start` = s.c2 "
        "WHEN MATCHED AND s.op = 2 THEN DELETE "
        "WHEN MATCHED AND s.op = 1 THEN UPDATE SET `_fivetran_active` = false, `_fivetran_end` = s.c3 "
        "WHEN MATCHED AND s.op = 0 THEN UPDATE SET `v` = s.c1, `_fivetran_end` = s.c3, `_fivetran_active` = s.c4 "
        "WHEN NOT MATCHED AND s.op = 0 THEN INSERT (`id`, `v`, `_fivetran_start`, `_fivetran_end`, `_fivetran_active`) "
        "VALUES (s.c0, s.c1, s.c2, s.c3, s.c4)")
    assert sql.history_current_versions_sql("tgt", "keys", ["id"], "_fivetran_start", "_fivetran_active") == (
        "SELECT * FROM (SELECT t.*, k.eff AS fivetran_eff_, MAX(CASE WHEN t.`_fivetran_start` < k.eff "
        "THEN t.`_fivetran_start` END) OVER (PARTITION BY k.k0) AS fivetran_prev_ FROM tgt t JOIN keys k "
        "ON t.`id` = k.k0) x WHERE x.`_fivetran_active` = true OR x.`_fivetran_start` >= x.fivetran_eff_ "
        "OR x.`_fivetran_start` = x.fivetran_prev_")


def test_migration_statements():
    assert sql.set_all_rows_sql("tgt", "v1", Column("a", T.INT)) == (
        "MERGE INTO tgt AS t USING v1 AS s ON true WHEN MATCHED AND NOT (t.`a` <=> CAST(s.v AS INT)) "
        "THEN UPDATE SET `a` = CAST(s.v AS INT)")
    assert sql.copy_column_sql("tgt", "a", "b c") == "UPDATE tgt SET `b c` = `a` WHERE NOT (`b c` <=> `a`)"


def test_newer_by_orders_with_null_oldest_and_ties_by_the_next_column():
    t = TableSchema("d", (Column("id", T.INT, primary_key=True), Column("cur", T.LONG), Column("at", T.UTC_DATETIME)))
    assert sql.newer_sql(t, ["cur"]) == "(s.c1 > t.`cur` OR (s.c1 IS NOT NULL AND t.`cur` IS NULL))"
    assert sql.newer_sql(t, ["cur", "at"]) == (
        "(((s.c1 > t.`cur` OR (s.c1 IS NOT NULL AND t.`cur` IS NULL))) OR "
        "(s.c1 <=> t.`cur` AND (s.c2 > t.`at` OR (s.c2 IS NOT NULL AND t.`at` IS NULL))))")
    got = sql.merge_sql("tgt", "src", t, ["id"], {0, 2}, set(), ["cur"])
    newer = "(s.c1 > t.`cur` OR (s.c1 IS NOT NULL AND t.`cur` IS NULL))"
    assert f"WHEN MATCHED AND s.op = 2 AND {newer} THEN DELETE" in got
    assert f"WHEN MATCHED AND s.op <> 2 AND {newer} THEN UPDATE SET" in got
    assert sql.insert_sql("tgt", "src", t, sql.OP_APPEND).endswith("WHERE s.op = 4")


def test_type_changes_say_what_the_stored_values_must_pass():
    from delta_destination.core.types import value_check as check

    c = lambda t, p=None, s=None: Column("c", t, precision=p, scale=s)  # noqa: E731
    for old, new in [(c(T.INT), c(T.LONG)), (c(T.SHORT), c(T.FLOAT)), (c(T.FLOAT), c(T.DOUBLE)),
                     (c(T.DECIMAL, 10, 2), c(T.DECIMAL, 20, 4)), (c(T.INT), c(T.DECIMAL, 12, 2)),
                     (c(T.NAIVE_DATE), c(T.UTC_DATETIME)), (c(T.LONG), c(T.STRING)), (c(T.LONG), c(T.DOUBLE)),
                     (c(T.DECIMAL, 38, 2), c(T.DOUBLE))]:
        assert check(old, new) == "none", (old, new)
    for old, new in [(c(T.DOUBLE), c(T.FLOAT)), (c(T.DECIMAL, 38, 0), c(T.FLOAT)), (c(T.LONG), c(T.FLOAT))]:
        assert check(old, new) == "range", (old, new)
    for old, new in [(c(T.DECIMAL, 20, 4), c(T.DECIMAL, 20, 2)), (c(T.DECIMAL, 10, 2), c(T.DECIMAL, 9, 2)),
                     (c(T.DOUBLE), c(T.INT)), (c(T.BINARY), c(T.STRING)), (c(T.LONG), c(T.DECIMAL, 20, 2)),
                     (c(T.STRING), c(T.INT)), (c(T.UTC_DATETIME), c(T.NAIVE_DATE))]:
        assert check(old, new) == "exact", (old, new)
    assert sql.altered_values_sql("t1", [("d", "DECIMAL(20,4)", "DECIMAL(5,1)", "exact")]) == (
        "SELECT SUM(CASE WHEN `d` IS NOT NULL AND NOT (CAST(CAST(`d` AS DECIMAL(5,1)) AS DECIMAL(20,4)) <=> `d`) "
        "THEN 1 ELSE 0 END) AS c0 FROM t1")
    assert sql.altered_values_sql("t1", [("x", "DOUBLE", "FLOAT", "range")]) == (
        "SELECT SUM(CASE WHEN `x` IS NOT NULL AND ABS(CAST(`x` AS DOUBLE)) > 3.4028234663852886e+38 "
        "AND ABS(CAST(`x` AS DOUBLE)) < CAST('Infinity' AS DOUBLE) THEN 1 ELSE 0 END) AS c0 FROM t1")


def test_active_after_sql():
    from delta_destination.core.sql import active_after_sql

    assert active_after_sql("t1", "_fivetran_start", "_fivetran_active", "2005-05-28T20:57:00.000000Z") == (
        "SELECT COUNT(*) AS n FROM t1 WHERE `_fivetran_active` = true "
        "AND `_fivetran_start` > CAST('2005-05-28T20:57:00.000000Z' AS TIMESTAMP)")


def test_metadata_only_column_statements():
    assert statements.rename_column_sql("delta.`/wh/s/t`", "a b", "new `name` é") == \
        "ALTER TABLE delta.`/wh/s/t` RENAME COLUMN `a b` TO `new ``name`` é`"
    assert statements.rename_column_sql("t1", "id", "ID") == "ALTER TABLE t1 RENAME COLUMN `id` TO `ID`"
    assert statements.drop_columns_sql("delta.`/wh/s/t`", ["a b", "c=d"]) == \
        "ALTER TABLE delta.`/wh/s/t` DROP COLUMNS (`a b`, `c=d`)"
    assert statements.drop_columns_sql("t1", ["x"]) == "ALTER TABLE t1 DROP COLUMNS (`x`)"


def test_drop_safe_statistics_list_names_only_plain_columns():
    from delta_destination.core import metadata

    kept = TableSchema("t", (Column("id", T.INT), Column("a b", T.STRING), Column("Größe", T.LONG),
                             Column("d", T.DECIMAL, precision=10, scale=2), Column("_fivetran_synced", T.UTC_DATETIME)))
    assert metadata.stats_properties(kept) == {
        metadata.STATS_COLUMNS: "`id`,`a b`,`Größe`,`_fivetran_synced`", metadata.NUM_INDEXED: "-1"}
    assert metadata.drop_safe_stats_properties(kept) == {
        metadata.STATS_COLUMNS: "`id`,`_fivetran_synced`", metadata.NUM_INDEXED: "-1"}
    odd_only = TableSchema("t", (Column("a b", T.STRING), Column("d", T.DECIMAL, precision=10, scale=2)))
    assert metadata.drop_safe_stats_properties(odd_only) == {metadata.STATS_COLUMNS: "", metadata.NUM_INDEXED: "0"}


def test_engine_statements():
    assert statements.set_properties_sql("t1", {"a": "x'y"}) == "ALTER TABLE t1 SET TBLPROPERTIES ('a' = 'x\\'y')"
    assert statements.register_table_sql("t_1", "s3://b/wh/s/t") == \
        "CREATE TABLE IF NOT EXISTS t_1 USING delta LOCATION 's3://b/wh/s/t'"
    assert statements.show_property_sql("delta.`s3a://b/t`", "k") == "SHOW TBLPROPERTIES delta.`s3a://b/t` ('k')"
    assert statements.drop_table_sql("t_1") == "DROP TABLE IF EXISTS t_1"


def test_rewrites_are_selects_the_engine_overwrites_with():
    current = TableSchema("t", (Column("id", T.INT, primary_key=True), Column("a b", T.STRING), Column("d", T.DOUBLE)))
    target = TableSchema("t", (Column("id", T.LONG, primary_key=True), Column("a b", T.JSON), Column("n", T.NAIVE_DATE)))
    assert sql.rewrite_select_sql("t1", current, target) == \
        "SELECT CAST(`id` AS BIGINT) AS `id`, `a b`, CAST(NULL AS DATE) AS `n` FROM t1"
    assert sql.recast_select_sql("src", target.columns) == \
        "SELECT CAST(`id` AS BIGINT) AS `id`, CAST(`a b` AS STRING) AS `a b`, CAST(`n` AS DATE) AS `n` FROM src"
    assert sql.renamed_select_sql("t1", [("id", "id"), ("a b", "A`b")]) == "SELECT `id` AS `id`, `a b` AS `A``b` FROM t1"
    assert sql.add_column_select_sql("t1", "v", "p_1", current.columns, Column("new", T.DECIMAL, precision=5, scale=1)) == (
        "SELECT h.`id`, h.`a b`, h.`d`, CAST(p.`p_1` AS DECIMAL(5,1)) AS `new` FROM t1 h CROSS JOIN v p")
    assert sql.any_row_sql("t1") == "SELECT 1 FROM t1 LIMIT 1"
    assert sql.max_sql("t1", "_fivetran_synced") == "SELECT MAX(`_fivetran_synced`) AS m FROM t1"
    assert sql.probe_insert_sql("t1") == "INSERT INTO t1 VALUES (1)"


def test_sync_mode_selects():
    kept = [Column("id", T.INT), Column("flag", T.BOOLEAN)]
    assert sql.to_history_select_sql("t1", "v", kept, "flag") == (
        "SELECT h.`id`, h.`flag`, "
        "CAST(CASE WHEN COALESCE(h.`flag`, false) THEN p.ep ELSE p.st END AS TIMESTAMP) AS `_fivetran_start`, "
        "CAST(CASE WHEN COALESCE(h.`flag`, false) THEN p.ep ELSE p.mx END AS TIMESTAMP) AS `_fivetran_end`, "
        "NOT COALESCE(h.`flag`, false) AS `_fivetran_active` FROM t1 h CROSS JOIN v p")
    assert sql.latest_versions_select_sql("t1", ["id", "k 2"], ["id", "k 2", "_fivetran_deleted"], "_fivetran_deleted",
                                          True, "rn_1") == (
        "SELECT x.`id`, x.`k 2`, COALESCE(NOT x.`_fivetran_active`, false) AS `_fivetran_deleted` FROM "
        "(SELECT *, ROW_NUMBER() OVER (PARTITION BY `id`, `k 2` ORDER BY `_fivetran_start` DESC) AS rn_1 FROM t1) x "
        "WHERE x.rn_1 = 1 AND x.`_fivetran_active` = true")


HISTORY = TableSchema("h", (Column("id", T.INT, primary_key=True), Column("v", T.STRING),
                            Column("_fivetran_start", T.UTC_DATETIME, primary_key=True),
                            Column("_fivetran_end", T.UTC_DATETIME), Column("_fivetran_active", T.BOOLEAN)))


def test_history_column_migration_statements():
    assert sql.history_set_column_merge_sql("t1", "{view}", HISTORY, ["id"], HISTORY.get("v"), adding=False) == (
        "MERGE INTO t1 AS t USING ("
        "SELECT h.`id` AS c0, h.`v` AS c1, h.`_fivetran_start` AS c2, CAST(p.te AS TIMESTAMP) AS c3, false AS c4, "
        "1 AS op FROM t1 h CROSS JOIN {view} p WHERE h.`_fivetran_active` = true AND h.`_fivetran_start` < p.ts "
        "AND NOT (h.`v` <=> CAST(p.v AS STRING)) "
        "UNION ALL SELECT h.`id` AS c0, CAST(p.v AS STRING) AS c1, CAST(p.ts AS TIMESTAMP) AS c2, "
        "CAST(p.mx AS TIMESTAMP) AS c3, true AS c4, 0 AS op FROM t1 h CROSS JOIN {view} p LEFT ANTI JOIN "
        "(SELECT y.`id` AS k0 FROM t1 y CROSS JOIN {view} p2 WHERE y.`_fivetran_start` = p2.ts) x ON h.`id` = x.k0 "
        "WHERE h.`_fivetran_active` = true AND h.`_fivetran_start` < p.ts AND NOT (h.`v` <=> CAST(p.v AS STRING)) "
        "UNION ALL SELECT h.`id` AS c0, CAST(p.v AS STRING) AS c1, h.`_fivetran_start` AS c2, h.`_fivetran_end` AS c3, "
        "h.`_fivetran_active` AS c4, 2 AS op FROM t1 h CROSS JOIN {view} p WHERE (h.`_fivetran_start` = p.ts OR "
        "(h.`_fivetran_active` = true AND h.`_fivetran_start` > p.ts)) AND NOT (h.`v` <=> CAST(p.v AS STRING))) AS s "
        "ON t.`id` = s.c0 AND t.`_fivetran_start` = s.c2 "
        "WHEN MATCHED AND s.op = 1 THEN UPDATE SET `_fivetran_active` = false, `_fivetran_end` = s.c3 "
        "WHEN MATCHED AND s.op = 2 THEN UPDATE SET `v` = s.c1 "
        "WHEN NOT MATCHED AND s.op = 0 THEN INSERT (`id`, `v`, `_fivetran_start`, `_fivetran_end`, `_fivetran_active`) "
        "VALUES (s.c0, s.c1, s.c2, s.c3, s.c4)")
    added = HISTORY.with_columns(HISTORY.columns + (Column("n", T.INT),))
    select = sql.history_add_column_select_sql("t1", "v", added, ["id"], added.get("n"))
    assert select.startswith("SELECT h.`id` AS `id`, h.`v` AS `v`, h.`_fivetran_start` AS `_fivetran_start`, "
                             "CASE WHEN h.`_fivetran_active` = true AND h.`_fivetran_start` < p.ts AND "
                             "CAST(p.v AS INT) IS NOT NULL THEN CAST(p.te AS TIMESTAMP) ELSE h.`_fivetran_end` END")
    assert select.endswith("LEFT ANTI JOIN (SELECT y.`id` FROM t1 y CROSS JOIN v p2 WHERE y.`_fivetran_start` = p2.ts) "
                           "x ON h.`id` = x.`id` WHERE h.`_fivetran_active` = true AND h.`_fivetran_start` < p.ts AND "
                           "CAST(p.v AS INT) IS NOT NULL")
