"""The core's SQL builders are pure: exact strings, no engine."""
from __future__ import annotations

from delta_destination.core import sql
from delta_destination.core.model import Column, DataType as T, TableSchema

TABLE = TableSchema("orders", (
    Column("id", T.INT, primary_key=True),
    Column("a b", T.STRING),
    Column("ts", T.NAIVE_DATETIME),
))


def test_properties_and_column_defs():
    assert sql.properties_sql({"fivetran.schema": "{\"a\":'x'}", "k": "v"}) == \
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
    assert sql.rename_column_sql("delta.`/wh/s/t`", "a b", "new `name` é") == \
        "ALTER TABLE delta.`/wh/s/t` RENAME COLUMN `a b` TO `new ``name`` é`"
    assert sql.rename_column_sql("t1", "id", "ID") == "ALTER TABLE t1 RENAME COLUMN `id` TO `ID`"
    assert sql.drop_columns_sql("delta.`/wh/s/t`", ["a b", "c=d"]) == \
        "ALTER TABLE delta.`/wh/s/t` DROP COLUMNS (`a b`, `c=d`)"
    assert sql.drop_columns_sql("t1", ["x"]) == "ALTER TABLE t1 DROP COLUMNS (`x`)"


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
