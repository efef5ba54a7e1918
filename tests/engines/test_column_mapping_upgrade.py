"""Renames and drops in place on tables the default engine (auto) created, through real gRPC.

Such a table has no column mapping; under `column_changes` = `in_place` (the default) its first
rename or drop goes to Apache Spark + Delta, which turns column mapping on (reader 3 / writer 7,
the columnMapping feature named) in the commit that writes the Fivetran metadata, then renames or
drops in the log. No data file is added or removed (read from the Delta log); Sail serves the
MERGEs after it (upsert, partial update, delete, with deletion vectors), a rewrite, and a history
table, and a widening with no table setting (in place; a table's own `false` rewrites). `rewrite`
keeps the table's protocol and rewrites, as before. Rows are read back with
delta-rs's query engine and with Apache Spark.
"""
from __future__ import annotations

import datetime as dt

import pytest

from testkit.delta_read import commits_kinds, delta_version, read_delta_table
from testkit.fivetran_requests import (H, MAX, batch_file, col, columns_of, describe, history_request, t,
                                       table, version, write_request)
from testkit.server_process import served
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb

UTC = dt.timezone.utc
SYNC = dt.datetime(2024, 1, 1, 10, 0, tzinfo=UTC)
ODD = "a b,c=d"          # a name Delta takes only with column mapping
NEW = "new é"
REWRITE = {"column_changes": "rewrite"}


def cols(key_name=ODD, gone=True):
    out = [col("id", "INT", pk=True), col(key_name, "STRING"), col("amount", "DOUBLE"), col("note", "STRING")]
    return out + ([col("gone", "STRING")] if gone else []) + [col("_fivetran_synced", "UTC_DATETIME")]


def live_files(path) -> set[str]:
    from deltalake import DeltaTable

    return set(DeltaTable(path).get_add_actions(flatten=True).column("path").to_pylist())


def protocol(path):
    from deltalake import DeltaTable

    p = DeltaTable(path).protocol()
    return p.min_reader_version, p.min_writer_version, sorted(p.reader_features or [])


def rename(stub, schema, name, old, new, configuration=None):
    return stub.Migrate(pb.MigrateRequest(configuration=configuration or {}, details=pb.MigrationDetails(
        schema=schema, table=name, rename=pb.RenameOperation(rename_column=pb.RenameColumn(from_column=old, to_column=new)))))


def alter(stub, schema, tproto, configuration=None):
    return stub.AlterTable(pb.AlterTableRequest(schema_name=schema, table=tproto, drop_columns=True,
                                                configuration=configuration or {}))


def no_data_file_changed(path, first, last):
    made = commits_kinds(path, first, last)
    assert made and all(not ({"add", "remove"} & kinds) for _, kinds in made), made
    return made


def spark_rows(spark_url, path):
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(spark_url).create()
    try:
        return [r.asDict() for r in spark.read.format("delta").load(path).orderBy("id").collect()]
    finally:
        spark.stop()


def spark_sql(spark_url, sql):
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(spark_url).create()
    try:
        spark.sql(sql).collect()
    finally:
        spark.stop()


def merges(stub, schema, name, tproto, second, tmp_path, next_id):
    """An upsert (id 2 changed, a new id), a partial update (id 1's note only) and a delete (id 3),
    in one WriteBatch, the way Fivetran sends them."""
    assert stub.WriteBatch(write_request(schema, tproto, replace=[batch_file(tmp_path, tproto, [
        {"id": 2, second: "b2", "amount": 2.5, "note": "n2", "_fivetran_synced": SYNC},
        {"id": next_id, second: "x", "amount": 9.0, "note": "new", "_fivetran_synced": SYNC}])],
        update=[batch_file(tmp_path, tproto, [{"id": 1, "note": f"upd{next_id}", "_fivetran_synced": SYNC}],
                           kind="update", columns=["id", "note", "_fivetran_synced"])],
        delete=[batch_file(tmp_path, tproto, [{"id": 3, "_fivetran_synced": SYNC}], kind="delete",
                           columns=["id", "_fivetran_synced"])])).success


def both_readers(spark_url, path, expected):
    """delta-rs's query engine and Apache Spark read the same rows (without _fivetran_synced)."""
    strip = lambda rows: sorted(({k: v for k, v in r.items() if k != "_fivetran_synced"} for r in rows),
                                key=lambda r: r["id"])
    assert strip(read_delta_table(path).to_pylist()) == expected
    assert strip(spark_rows(spark_url, path)) == expected


def test_rename_and_drop_in_place_on_the_default_engine(tmp_path, dedicated_server, shared_spark):
    srv = dedicated_server(tmp_path / "wh", tmp_path / "server.log", ("--spark-remote", shared_spark.url))
    stub, log, path = srv.stub, tmp_path / "server.log", f"{srv.warehouse}/s/m"
    t1 = table("m", *cols())
    assert stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=t1)).success
    assert stub.WriteBatch(write_request("s", t1, replace=[batch_file(tmp_path, t1, [
        {"id": i, ODD: f"v{i}", "amount": float(i), "note": None, "gone": f"g{i}", "_fivetran_synced": SYNC}
        for i in (1, 2, 3)])])).success
    assert protocol(path)[:2] == (1, 2)

    # The rename: column mapping turned on with the metadata superset, RENAME COLUMN, the metadata.
    files, v = live_files(path), delta_version(path)
    assert rename(stub, "s", "m", ODD, NEW).WhichOneof("response") == "success"
    made = no_data_file_changed(path, v + 1, delta_version(path))
    assert [op for op, _ in made] == ["SET TBLPROPERTIES", "RENAME COLUMN", "SET TBLPROPERTIES"], made
    assert live_files(path) == files
    assert protocol(path) == (3, 7, ["columnMapping", "timestampNtz"])
    assert "a renamed or dropped column is a metadata commit on Apache Spark + Delta" in log.read_text()
    with pytest.raises(Exception, match="columnMapping"):   # loudly, not NULLs
        from deltalake import DeltaTable

        DeltaTable(path).to_pyarrow_table()
    t2 = table("m", *cols(NEW))
    assert list(columns_of(describe(stub, "s", "m"))) == ["id", NEW, "amount", "note", "gone", "_fivetran_synced"]
    merges(stub, "s", "m", t2, NEW, tmp_path, 4)
    assert served(log, "m")[-1].startswith("engine sail"), served(log, "m")
    both_readers(shared_spark.url, path, [
        {"id": 1, NEW: "v1", "amount": 1.0, "note": "upd4", "gone": "g1"},
        {"id": 2, NEW: "b2", "amount": 2.5, "note": "n2", "gone": "g2"},  # a column the batch leaves out is kept
        {"id": 4, NEW: "x", "amount": 9.0, "note": "new", "gone": None}])

    # The drop: in place on the mapped table, then MERGEs again on Sail.
    files, v = live_files(path), delta_version(path)
    t3 = table("m", *cols(NEW, gone=False))
    assert alter(stub, "s", t3).success
    made = no_data_file_changed(path, v + 1, delta_version(path))
    assert "DROP COLUMNS" in [op for op, _ in made], made
    assert live_files(path) == files
    assert stub.WriteBatch(write_request("s", t3, replace=[batch_file(tmp_path, t3, [
        {"id": 3, NEW: "back", "amount": 3.0, "note": None, "_fivetran_synced": SYNC}])])).success
    merges(stub, "s", "m", t3, NEW, tmp_path, 5)
    assert served(log, "m")[-1].startswith("engine sail"), served(log, "m")
    expected = [{"id": 1, NEW: "v1", "amount": 1.0, "note": "upd5"}, {"id": 2, NEW: "b2", "amount": 2.5, "note": "n2"},
                {"id": 4, NEW: "x", "amount": 9.0, "note": "new"}, {"id": 5, NEW: "x", "amount": 9.0, "note": "new"}]
    both_readers(shared_spark.url, path, expected)

    # Deletion vectors on (as a user or the destination's plan turns them on): Sail's MERGE deletes by them.
    spark_sql(shared_spark.url, f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    v = delta_version(path)
    merges(stub, "s", "m", t3, NEW, tmp_path, 6)
    assert served(log, "m")[-1].startswith("engine sail"), served(log, "m")
    both_readers(shared_spark.url, path, [{**expected[0], "note": "upd6"}, *expected[1:],
                                          {"id": 6, NEW: "x", "amount": 9.0, "note": "new"}])
    assert any(kinds & {"add", "remove"} for _, kinds in commits_kinds(path, v + 1, delta_version(path)))

    # A change Delta cannot make in place (DOUBLE to STRING) is Sail's rewrite of the mapped table.
    t4 = table("m", col("id", "INT", pk=True), col(NEW, "STRING"), col("amount", "STRING"), col("note", "STRING"),
               col("_fivetran_synced", "UTC_DATETIME"))
    v = delta_version(path)
    assert alter(stub, "s", t4).success
    assert [op for op, kinds in commits_kinds(path, v + 1, delta_version(path)) if {"add", "remove"} & kinds] == ["WRITE"]
    assert protocol(path) == (3, 7, ["columnMapping", "deletionVectors", "timestampNtz"])
    assert stub.WriteBatch(write_request("s", t4, replace=[batch_file(tmp_path, t4, [
        {"id": 7, NEW: "y", "amount": "7", "note": None, "_fivetran_synced": SYNC}])])).success
    rows = read_delta_table(path).to_pylist()
    assert sorted((r["id"], r[NEW], r["amount"]) for r in rows) == [
        (1, "v1", "1.0"), (2, "b2", "2.5"), (4, "x", "9.0"), (5, "x", "9.0"), (6, "x", "9.0"), (7, "y", "7")]
    assert sorted((r["id"], r["amount"]) for r in spark_rows(shared_spark.url, path)) == \
        [(1, "1.0"), (2, "2.5"), (4, "9.0"), (5, "9.0"), (6, "9.0"), (7, "7")]

    # A history-mode table renamed in place, then written in history mode on Sail.
    assert stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=H)).success
    hpath = f"{srv.warehouse}/s/hist"
    assert stub.WriteHistoryBatch(history_request("s", tmp_path, replace=[version(1, t(1), name="a", amount=1.0),
                                                                          version(2, t(1), name="b", amount=2.0)])).success
    v, hfiles = delta_version(hpath), live_files(hpath)
    assert rename(stub, "s", "hist", "name", "full name").WhichOneof("response") == "success"
    no_data_file_changed(hpath, v + 1, delta_version(hpath))
    assert live_files(hpath) == hfiles
    renamed = table("hist", *[col("full name", "STRING") if c.name == "name" else c for c in H.columns])
    # A new version of id 1 (its earliest start closes the old one), in the renamed column.
    req2 = write_request("s", renamed, replace=[batch_file(tmp_path, renamed, [
        {"id": 1, "full name": "a2", "amount": 1.5, "_fivetran_start": t(2), "_fivetran_end": MAX,
         "_fivetran_active": True, "_fivetran_synced": t(2)}])])
    e_path, e_key = batch_file(tmp_path, renamed, [{"id": 1, "_fivetran_start": t(2)}], kind="earliest",
                               columns=["id", "_fivetran_start"])
    hreq = pb.WriteHistoryBatchRequest(schema_name="s", table=renamed, replace_files=req2.replace_files,
                                       earliest_start_files=[e_path], file_params=req2.file_params)
    for k, val in req2.keys.items():
        hreq.keys[k] = val
    hreq.keys[e_path] = e_key
    assert stub.WriteHistoryBatch(hreq).success
    got = sorted((r["id"], r["full name"], r["_fivetran_active"]) for r in read_delta_table(hpath).to_pylist())
    assert got == [(1, "a", False), (1, "a2", True), (2, "b", True)]
    assert sorted((r["id"], r["full name"], r["_fivetran_active"]) for r in spark_rows(shared_spark.url, hpath)) == got

    # A widening under `in_place` needs no table setting: type widening is turned on with it, on Spark;
    # a table's own delta.enableTypeWidening = false keeps it rewriting on Sail.
    for name, own, in_place in (("wide", None, True), ("nowide", "false", False)):
        w1 = table(name, col("id", "INT", pk=True), col("n", "INT"), col("_fivetran_synced", "UTC_DATETIME"))
        wpath = f"{srv.warehouse}/s/{name}"
        assert stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=w1)).success
        assert stub.WriteBatch(write_request("s", w1, replace=[batch_file(tmp_path, w1, [
            {"id": 1, "n": 2147483647, "_fivetran_synced": SYNC}])])).success
        if own is not None:
            spark_sql(shared_spark.url, f"ALTER TABLE delta.`{wpath}` SET TBLPROPERTIES ('delta.enableTypeWidening' = '{own}')")
        v = delta_version(wpath)
        w2 = table(name, col("id", "INT", pk=True), col("n", "LONG"), col("_fivetran_synced", "UTC_DATETIME"))
        assert stub.AlterTable(pb.AlterTableRequest(schema_name="s", table=w2)).success
        made = commits_kinds(wpath, v + 1, delta_version(wpath))
        data_ops = [op for op, kinds in made if {"add", "remove"} & kinds]
        assert data_ops == ([] if in_place else ["WRITE"]), made
        assert ("CHANGE COLUMN" in [op for op, _ in made]) == in_place, made
        assert [(r["id"], r["n"]) for r in spark_rows(shared_spark.url, wpath)] == [(1, 2147483647)]

    # `rewrite` keeps the protocol: the rename and the drop rewrite in one commit each, as before.
    k1 = table("k", *cols())
    kpath = f"{srv.warehouse}/s/k"
    assert stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=k1)).success
    assert stub.WriteBatch(write_request("s", k1, replace=[batch_file(tmp_path, k1, [
        {"id": 1, ODD: "v", "amount": 1.0, "note": "n", "gone": "g", "_fivetran_synced": SYNC}])])).success
    v = delta_version(kpath)
    assert rename(stub, "s", "k", ODD, NEW, REWRITE).WhichOneof("response") == "success"
    assert alter(stub, "s", table("k", *cols(NEW, gone=False)), REWRITE).success
    made = commits_kinds(kpath, v + 1, delta_version(kpath))
    assert [op for op, kinds in made if {"add", "remove"} & kinds] == ["WRITE", "WRITE"], made
    assert protocol(kpath)[:2] == (1, 2)
    from deltalake import DeltaTable

    assert DeltaTable(kpath).to_pyarrow_table().to_pylist() == [
        {"id": 1, NEW: "v", "amount": 1.0, "note": "n", "_fivetran_synced": SYNC}]


def test_merges_after_a_rename_and_a_drop(stub, server, engine, unique_schema, tmp_path, request):
    """On each engine as configured: --engine sail rewrites (it has no RENAME/DROP COLUMN), --engine
    spark renames and drops in place (its tables have column mapping from creation); the MERGEs after
    each change (upsert, partial update, delete) read back right."""
    schema, path = unique_schema, f"{server.warehouse}/{unique_schema}/m"
    t1 = table("m", *cols())
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=t1)).success
    assert stub.WriteBatch(write_request(schema, t1, replace=[batch_file(tmp_path, t1, [
        {"id": i, ODD: f"v{i}", "amount": float(i), "note": None, "gone": f"g{i}", "_fivetran_synced": SYNC}
        for i in (1, 2, 3)])])).success
    v = delta_version(path)
    assert rename(stub, schema, "m", ODD, NEW).WhichOneof("response") == "success"
    assert alter(stub, schema, table("m", *cols(NEW, gone=False))).success
    made = commits_kinds(path, v + 1, delta_version(path))
    rewrites = [op for op, kinds in made if {"add", "remove"} & kinds]
    assert rewrites == ([] if engine == "spark" else ["WRITE", "WRITE"]), made
    t3 = table("m", *cols(NEW, gone=False))
    merges(stub, schema, "m", t3, NEW, tmp_path, 4)
    rows = sorted(read_delta_table(path).to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r[NEW], r["amount"], r["note"]) for r in rows] == [
        (1, "v1", 1.0, "upd4"), (2, "b2", 2.5, "n2"), (4, "x", 9.0, "new")]
    assert set(rows[0]) == {"id", NEW, "amount", "note", "_fivetran_synced"}
