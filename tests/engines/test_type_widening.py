"""Type changes Delta widens, through real gRPC, on a table with type widening on (its
`delta.enableTypeWidening`, turned on here with Spark SQL as a user would): in the log only on
Apache Spark + Delta (and on the default engine, which hands such an AlterTable to Spark), a
rewrite in one commit for changes Delta cannot widen.

A widened table carries Delta's `typeWidening` reader feature, which delta-rs 1.6.6 refuses
("Unsupported table features required: [TypeWidening]"), so the rows of a widened table are read
back with Apache Spark (the session's shared engine) or embedded Sail, both Delta 4 readers; a
table Sail rewrote is read with delta-rs as elsewhere. Which files the table references is read
from its Delta log (delta-rs reads the log of a widened table, not its rows).
"""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

from testkit.delta_read import commits_kinds, delta_version, read_delta_table
from testkit.server_process import served
from testkit.fivetran_requests import batch_file, col, columns_of, describe, table, write_request
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb

UTC = dt.timezone.utc
SYNC1 = dt.datetime(2024, 1, 1, 10, 0, tzinfo=UTC)
SYNC2 = dt.datetime(2024, 1, 2, 10, 0, tzinfo=UTC)

BEFORE = (col("id", "LONG", pk=True), col("s", "SHORT"), col("i", "INT"), col("f", "FLOAT"),
          col("d", "DECIMAL", precision=10, scale=2), col("day", "NAIVE_DATE"), col("n", "INT"),
          col("_fivetran_synced", "UTC_DATETIME"))
# Every widening of a Fivetran type onto Delta's list: SHORT->INT, INT->LONG, FLOAT->DOUBLE,
# DECIMAL precision and scale growth, NAIVE_DATE->NAIVE_DATETIME, INT->DECIMAL.
WIDENED = (col("id", "LONG", pk=True), col("s", "INT"), col("i", "LONG"), col("f", "DOUBLE"),
           col("d", "DECIMAL", precision=20, scale=4), col("day", "NAIVE_DATETIME"),
           col("n", "DECIMAL", precision=12, scale=2), col("_fivetran_synced", "UTC_DATETIME"))
# Then SHORT->INT->LONG (a column widened twice) and INT->DOUBLE.
AGAIN = (WIDENED[0], col("s", "LONG"), WIDENED[2], WIDENED[3], WIDENED[4], WIDENED[5], WIDENED[6],
         WIDENED[7])
ROWS = [{"id": 1, "s": 32767, "i": 2147483647, "f": 1.5, "d": Decimal("12345678.91"), "day": dt.date(2024, 1, 2),
         "n": -7, "_fivetran_synced": SYNC1},
        {"id": 2, "s": -5, "i": None, "f": None, "d": None, "day": dt.date(1, 1, 1), "n": None, "_fivetran_synced": SYNC1}]
WIDE_ROWS = [{"id": 2, "s": 70000, "i": 9000000000, "f": 1e300, "d": Decimal("1234567890123456.1234"),
              "day": dt.datetime(2024, 5, 6, 7, 8, 9), "n": Decimal("1234567890.12"), "_fivetran_synced": SYNC2},
             {"id": 3, "s": 1, "i": 1, "f": 0.25, "d": Decimal("1"), "day": dt.datetime(9999, 12, 31, 23, 59, 59),
              "n": Decimal("0.01"), "_fivetran_synced": SYNC2}]


def live_files(path) -> set[str]:
    from deltalake import DeltaTable

    return set(DeltaTable(path).get_add_actions(flatten=True).column("path").to_pylist())


def features(path) -> set[str]:
    from deltalake import DeltaTable

    p = DeltaTable(path).protocol()
    return set((p.reader_features or []) + (p.writer_features or []))


def alter(stub, schema, cols):
    return stub.AlterTable(pb.AlterTableRequest(schema_name=schema, table=table("w", *cols)))


def write(stub, schema, cols, rows, tmp_path):
    assert stub.WriteBatch(write_request(schema, table("w", *cols), replace=[batch_file(tmp_path, table("w", *cols), rows)])).success


def turn_widening_on(spark_url, path):
    """What a user does to have a table's type changes made in place (docs/column-changes.md)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(spark_url).create()
    try:
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')").collect()
    finally:
        spark.stop()


def spark_rows(spark_url, path):
    """The rows as Apache Spark + Delta reads them, and its schema."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(spark_url).create()
    try:
        df = spark.read.format("delta").load(path)
        return [r.asDict() for r in df.orderBy("id").collect()], df.schema.simpleString()
    finally:
        spark.stop()


def sail_rows(path):
    """The rows as embedded Sail 0.7.2 reads them (an engine of the test's own), and its schema."""
    from pyspark.sql import SparkSession
    from pysail.spark import SparkConnectServer

    server = SparkConnectServer(ip="127.0.0.1", port=0)
    server.start(background=True)
    try:
        _, port = server.listening_address
        spark = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").create()
        df = spark.read.format("delta").load(path)
        return [r.asDict() for r in df.orderBy("id").collect()], df.schema.simpleString()
    finally:
        server.stop()


WIDENED_SCHEMA = ("struct<id:bigint,s:int,i:bigint,f:double,d:decimal(20,4),day:timestamp_ntz,n:decimal(12,2),"
                  "_fivetran_synced:timestamp>")


def check_widened(stub, schema, path, rows, types):
    """The old rows in the new types, the new rows exactly, DescribeTable answering the new types."""
    got = columns_of(describe(stub, schema, "w"))
    assert got["s"][0] == types and got["i"] == ("LONG", False, None) and got["f"] == ("DOUBLE", False, None)
    assert got["d"] == ("DECIMAL", False, (20, 4)) and got["day"] == ("NAIVE_DATETIME", False, None)
    assert got["n"] == ("DECIMAL", False, (12, 2)) and got["id"] == ("LONG", True, None)
    by_id = {r["id"]: r for r in rows}
    one = by_id[1]
    assert (one["s"], one["i"], one["f"], one["d"], one["day"], one["n"]) == \
        (32767, 2147483647, 1.5, Decimal("12345678.9100"), dt.datetime(2024, 1, 2), Decimal("-7.00"))
    two, three = by_id[2], by_id[3]
    assert (two["s"], two["i"], two["f"], two["d"], two["n"]) == \
        (70000, 9000000000, 1e300, Decimal("1234567890123456.1234"), Decimal("1234567890.12"))
    assert three["day"] == dt.datetime(9999, 12, 31, 23, 59, 59)


# Spark only (tests/conftest.py SPARK_ONLY leaves out its Sail run: a test-local parametrization of
# the session's `engine` would make later tests of the same session get another engine's server):
# Sail alone rewrites (the rewrite tests of tests/engines/test_rpc_tables.py), and its rewrite of a DATE
# column to TIMESTAMP_NTZ fails on a table without the timestampNtz feature ("Table features must be
# specified"; docs/column-changes.md).
def test_widening_alter_table(stub, server, engine, unique_schema, tmp_path, request):
    """Metadata commits only (no data file added or removed), old rows read as the new types, a
    MERGE after it, a second widening of a widened column, and a change Delta cannot widen (LONG to
    STRING) rewriting in one commit."""
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=table("w", *BEFORE))).success
    path = f"{server.warehouse}/{unique_schema}/w"
    write(stub, unique_schema, BEFORE, ROWS, tmp_path)
    turn_widening_on(request.getfixturevalue("shared_spark").url, path)
    files, v = live_files(path), delta_version(path)
    assert alter(stub, unique_schema, WIDENED).success
    after = delta_version(path)
    made = commits_kinds(path, v + 1, after)
    if engine == "spark":
        assert all(not ({"add", "remove"} & kinds) for _, kinds in made), made    # metadata only
        assert [op for op, _ in made].count("CHANGE COLUMN") == 6, made           # one per widened column
        assert live_files(path) == files
        assert "typeWidening" in features(path)
    else:
        rewrites = [c for c in made if {"add", "remove"} & c[1]]
        assert len(rewrites) == 1 and rewrites[0][0] == "WRITE", made             # one overwrite commit
        assert "typeWidening" not in features(path)
    write(stub, unique_schema, WIDENED, WIDE_ROWS, tmp_path)                       # a MERGE after the change
    if engine == "spark":
        rows, spark_schema = spark_rows(request.getfixturevalue("shared_spark").url, path)
        assert spark_schema == WIDENED_SCHEMA
    else:
        rows = read_delta_table(path).to_pylist()
    check_widened(stub, unique_schema, path, rows, "INT")

    # A widened column widened again (SHORT->INT->LONG), then a change Delta cannot widen.
    v = delta_version(path)
    assert alter(stub, unique_schema, AGAIN).success
    made = commits_kinds(path, v + 1, delta_version(path))
    assert any(op == ("CHANGE COLUMN" if engine == "spark" else "WRITE") for op, _ in made), made
    text = AGAIN[:2] + (col("i", "STRING"),) + AGAIN[3:]
    v = delta_version(path)
    assert alter(stub, unique_schema, text).success
    made = commits_kinds(path, v + 1, delta_version(path))
    rewrites = [c for c in made if {"add", "remove"} & c[1]]
    assert len(rewrites) == 1 and rewrites[0][0] == "WRITE", made
    assert columns_of(describe(stub, unique_schema, "w"))["i"] == ("STRING", False, None)
    if engine == "spark":
        rows, _ = spark_rows(request.getfixturevalue("shared_spark").url, path)
    else:
        rows = read_delta_table(path).to_pylist()
    assert {r["id"]: (r["s"], r["i"]) for r in rows} == {1: (32767, "2147483647"), 2: (70000, "9000000000"),
                                                         3: (1, "1")}

    # Under the `column_changes` setting `rewrite` a table without type widening on is rewritten, and
    # stays readable by delta-rs.
    plain = (BEFORE[0], BEFORE[2], BEFORE[7])
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=table("p", *plain))).success
    ppath = f"{server.warehouse}/{unique_schema}/p"
    prow = {"id": 1, "i": 2147483647, "_fivetran_synced": SYNC1}
    assert stub.WriteBatch(write_request(unique_schema, table("p", *plain),
                                         replace=[batch_file(tmp_path, table("p", *plain), [prow])])).success
    v = delta_version(ppath)
    assert stub.AlterTable(pb.AlterTableRequest(schema_name=unique_schema, configuration={"column_changes": "rewrite"},
                                                table=table("p", plain[0], WIDENED[2], plain[2]))).success
    made = commits_kinds(ppath, v + 1, delta_version(ppath))
    assert [c[0] for c in made if {"add", "remove"} & c[1]] == ["WRITE"], made
    assert "typeWidening" not in features(ppath)
    assert [(r["id"], r["i"]) for r in read_delta_table(ppath).to_pylist()] == [(1, 2147483647)]


def test_default_engine_widens_on_spark_and_sail_keeps_writing_the_table(tmp_path, dedicated_server, shared_spark):
    """The default engine (auto, as `make run` starts it): the table is Sail's (type widening
    turned on by the user); the widening
    AlterTable goes to the local Apache Spark engine and adds or removes no data file; the MERGE
    after it is Sail's again (Sail 0.7.2 reads and writes a widened table); a change Delta cannot
    widen of a widened column is rewritten on Spark, in one commit."""
    srv = dedicated_server(tmp_path / "wh", tmp_path / "server.log")
    stub, path, log = srv.stub, f"{srv.warehouse}/s/w", tmp_path / "server.log"
    assert stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=table("w", *BEFORE))).success
    write(stub, "s", BEFORE, ROWS, tmp_path)
    turn_widening_on(shared_spark.url, path)
    files, v = live_files(path), delta_version(path)
    assert alter(stub, "s", WIDENED).success
    made = commits_kinds(path, v + 1, delta_version(path))
    assert all(not ({"add", "remove"} & kinds) for _, kinds in made), made
    assert [op for op, _ in made].count("CHANGE COLUMN") == 6, made
    assert live_files(path) == files and "typeWidening" in features(path)
    text = log.read_text()
    assert "a type widening is a metadata commit on Apache Spark + Delta" in text
    assert "widened in place" in text
    write(stub, "s", WIDENED, WIDE_ROWS, tmp_path)
    assert served(log, "w")[-1].startswith("engine sail"), served(log, "w")   # the MERGE is Sail's again
    rows, schema = sail_rows(path)
    assert schema == WIDENED_SCHEMA
    check_widened(stub, "s", path, rows, "INT")

    text_cols = WIDENED[:2] + (col("i", "STRING"),) + WIDENED[3:]
    v = delta_version(path)
    assert alter(stub, "s", text_cols).success
    made = commits_kinds(path, v + 1, delta_version(path))
    rewrites = [c for c in made if {"add", "remove"} & c[1]]
    assert len(rewrites) == 1 and rewrites[0][0] == "WRITE", made
    assert "a rewrite changes the type of a column Delta widened" in log.read_text()
    write(stub, "s", text_cols, [{**WIDE_ROWS[1], "id": 4, "i": "x"}], tmp_path)   # Sail writes it again
    assert served(log, "w")[-1].startswith("engine sail"), served(log, "w")
    rows, _ = sail_rows(path)
    assert {r["id"]: r["i"] for r in rows} == {1: "2147483647", 2: "9000000000", 3: "1", 4: "x"}
