"""The Iceberg metadata the destination writes (iceberg=metadata, docs/iceberg.md) read by Apache
Iceberg's own Java library: Spark 4.0 with iceberg-spark-runtime 1.10.0 in an environment of its own
(`make iceberg-reader`, scripts/iceberg_java_reader_env.sh), run as a subprocess
(testkit/iceberg_java_read.py) so it never meets the project's pyspark. pyiceberg is written by the
same people who wrote the mirror's library; this is the reader most engines (Spark, Trino's and
Flink's Iceberg, Snowflake's and Athena's catalogs) share.

Real gRPC calls with real encrypted batch files drive every kind of request; then each table is read
by the Java reader (current snapshot, and for some tables every snapshot by id) and compared with
delta-rs's read at the Delta version the snapshot's summary names: rows, column names, Iceberg and
Arrow types; and the Java library's snapshots and field ids with pyiceberg's."""
from __future__ import annotations

import datetime as dt
import time
from decimal import Decimal

import pyarrow as pa
import pytest

from delta_destination.core.iceberg.plan import SNAPSHOTS_KEPT
from delta_destination.doors.fivetran._proto import common_pb2, destination_sdk_pb2 as pb
from testkit.delta_read import delta_properties as read_delta_properties, delta_version, read_delta_table
from testkit.batch_files import UNMODIFIED
from testkit.fivetran_requests import MAX, H, col, history_request, t, table, ts, version
from testkit.iceberg_java_read import READER_DIR, read_with_java
from testkit.iceberg_requests import migrate, on, write
from testkit.iceberg_read import DELTA_VERSION, as_iceberg_types, iceberg_table, key_of, logical_type
from testkit.server_process import ROOT, RunningServer

pytestmark = pytest.mark.slow

UTC = dt.timezone.utc
T = table("orders", col("id", "LONG", pk=True), col("qty", "SHORT"), col("n", "INT"), col("name", "STRING"),
          col("amount", "DECIMAL", precision=10, scale=2), col("day", "NAIVE_DATE"), col("at", "NAIVE_DATETIME"),
          col("utc", "UTC_DATETIME"), col("raw", "BINARY"), col("doc", "JSON"), col("price", "DOUBLE"),
          col("ratio", "FLOAT"), col("ok", "BOOLEAN"), col("_fivetran_deleted", "BOOLEAN"),
          col("_fivetran_synced", "UTC_DATETIME"))
SYNCED = dt.datetime(2024, 6, 1, tzinfo=UTC)
LATER = dt.datetime(2024, 7, 3, tzinfo=UTC)  # synced after the Truncate's cut: the NULL row and soft deletes stay


def row(i, **over):
    r = {"id": i, "qty": i % 7 - 3, "n": i * 10, "name": f"name {i} é", "amount": Decimal(f"{i}.25"),
         "day": dt.date(2024, 1, 1 + i % 28), "at": dt.datetime(2024, 2, 3, 4, 5, 6, 7000),
         "utc": dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC), "raw": bytes([i % 256, 0, 255]),
         "doc": '{"a": %d, "b": [1, null]}' % i, "price": i / 3, "ratio": 0.5, "ok": i % 2 == 0,
         "_fivetran_deleted": False, "_fivetran_synced": SYNCED}
    r.update(over)
    return r


# The Iceberg type (as Iceberg's SchemaParser writes it) of each Arrow type a Delta read gives.
def iceberg_type(t: pa.DataType) -> str:
    if pa.types.is_decimal(t):
        return f"decimal({t.precision}, {t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamptz" if t.tz else "timestamp"
    return {pa.int8(): "int", pa.int16(): "int", pa.int32(): "int", pa.int64(): "long", pa.bool_(): "boolean",
            pa.float32(): "float", pa.float64(): "double", pa.string(): "string", pa.large_string(): "string",
            pa.binary(): "binary", pa.large_binary(): "binary", pa.date32(): "date"}[t]


@pytest.fixture(scope="module")
def java_reader():
    """The Java reader's environment, built by `make iceberg-reader` (never by a test run)."""
    if not (ROOT / READER_DIR / ".stamp").is_file():  # written by the script once it succeeded
        pytest.fail("the Iceberg Java reader environment is missing: run `make iceberg-reader` (make test-clients does)")
    return lambda tables, out: read_with_java(tables, out, ROOT)


@pytest.fixture(scope="module")
def auto_server(tmp_path_factory):
    """A server on the default engine (auto: embedded Sail for tables this small)."""
    base = tmp_path_factory.mktemp("iceberg-java")
    srv = RunningServer(base / "warehouse", base / "server.log", engine="auto")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def spark_server(dedicated_server, tmp_path_factory):
    """A server on the Apache Spark engine (the session's shared Spark JVM)."""
    base = tmp_path_factory.mktemp("iceberg-java-spark")
    return dedicated_server(base / "warehouse", base / "server.log", engine="spark")


def drive_orders(stub, s, tmp_path) -> None:
    """Every kind of live-table request on `orders`, ending with a copy of it (`orders_copy`)."""
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=T))).success
    nulls = {c: None for c in ("qty", "n", "name", "amount", "day", "at", "utc", "raw", "doc", "price", "ratio", "ok")}
    write(stub, s, T, tmp_path, replace=[row(i) for i in range(1, 41)] + [row(70, **nulls, _fivetran_synced=LATER)])
    write(stub, s, T, tmp_path, replace=[row(i, name=f"new {i}") for i in range(35, 61)])           # upserts
    every = [c.name for c in T.columns]                                  # the others: unmodified markers
    write(stub, s, T, tmp_path, update_columns=every, update=[
        {"id": i, "price": 1.5, "amount": Decimal("-7.10"), "_fivetran_synced": dt.datetime(2024, 7, 1, tzinfo=UTC)}
        for i in range(1, 11)])                                                                        # partial updates
    write(stub, s, T, tmp_path, delete=[{"id": i, "_fivetran_synced": dt.datetime(2024, 7, 2, tzinfo=UTC)}
                                        for i in range(11, 16)])                                     # hard deletes
    write(stub, s, T, tmp_path, update_columns=every,
          update=[{"id": i, "_fivetran_deleted": True, "_fivetran_synced": LATER} for i in range(16, 19)])  # soft deletes
    assert stub.Truncate(on(pb.TruncateRequest(schema_name=s, table_name="orders", synced_column="_fivetran_synced",
                                               utc_delete_before=ts(dt.datetime(2024, 6, 15, tzinfo=UTC))))).success
    added = table("orders", *T.columns, col("note", "STRING"))
    assert stub.AlterTable(on(pb.AlterTableRequest(schema_name=s, table=added))).success               # add column
    write(stub, s, added, tmp_path, replace=[row(i, note=f"note {i}") for i in range(100, 105)])
    retyped = table("orders", *[c if c.name != "n" else col("n", "STRING") for c in added.columns])
    assert stub.AlterTable(on(pb.AlterTableRequest(schema_name=s, table=retyped))).success             # type change
    migrate(stub, s, "orders", add=pb.AddOperation(add_column_with_default_value=pb.AddColumnWithDefaultValue(
        column="region", column_type=common_pb2.STRING, default_value="emea")))
    migrate(stub, s, "orders", rename=pb.RenameOperation(rename_column=pb.RenameColumn(from_column="name",
                                                                                      to_column="title")))
    migrate(stub, s, "orders", copy=pb.CopyOperation(copy_table=pb.CopyTable(from_table="orders",
                                                                             to_table="orders_copy")))


def drive_history(stub, s, tmp_path) -> None:
    """History mode: versions opened, closed by later ones, partially updated and deleted."""
    def hist(**kw):
        assert stub.WriteHistoryBatch(on(history_request(s, tmp_path, **kw))).success

    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=H))).success
    hist(replace=[version(i, t(1), name=f"v1 {i}", amount=i * 1.5) for i in range(1, 6)])
    hist(earliest=[{"id": 1, "_fivetran_start": t(2)}, {"id": 2, "_fivetran_start": t(2)}],
         replace=[version(1, t(2), name="v2 1", amount=10.0), version(2, t(2), name="v2 2", amount=20.0)])
    cols = ["id", "name", "amount", "_fivetran_start", "_fivetran_end", "_fivetran_active", "_fivetran_synced"]
    hist(earliest=[{"id": 3, "_fivetran_start": t(3)}], update_columns=cols,      # partial: unmodified markers
         update=[{"id": 3, "name": UNMODIFIED, "amount": 33.0, "_fivetran_start": t(3), "_fivetran_end": MAX,
                  "_fivetran_active": True, "_fivetran_synced": t(3)}])
    hist(delete=[{"id": 4, "_fivetran_end": t(4), "_fivetran_synced": t(4)}])


def drive_on_spark(stub, s, tmp_path) -> None:
    """One table written by the Apache Spark engine (its tables have column mapping: the Parquet files carry
    field ids): create, upserts, a partial update, an added column and a type change (int to string: the
    table rewritten; a widening Spark does in place is test_a_short_widened_in_place_on_spark's)."""
    small = table("sparked", *[c for c in T.columns if c.name in ("id", "qty", "n", "name", "amount", "day", "at", "utc",
                                                                  "raw", "doc", "ok", "_fivetran_deleted",
                                                                  "_fivetran_synced")])
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=small))).success
    cut = lambda r: {k: v for k, v in r.items() if k in {c.name for c in small.columns}}
    write(stub, s, small, tmp_path, replace=[cut(row(i)) for i in range(1, 21)])
    write(stub, s, small, tmp_path, replace=[cut(row(i, name=f"new {i}")) for i in range(15, 26)])
    write(stub, s, small, tmp_path, update_columns=[c.name for c in small.columns],
          update=[{"id": i, "amount": Decimal("99.99")} for i in range(1, 6)])
    added = table("sparked", *small.columns, col("note", "STRING"))
    assert stub.AlterTable(on(pb.AlterTableRequest(schema_name=s, table=added))).success
    write(stub, s, added, tmp_path, replace=[cut(row(i)) | {"note": "x"} for i in range(30, 33)])
    retyped = table("sparked", *[c if c.name != "n" else col("n", "STRING") for c in added.columns])
    assert stub.AlterTable(on(pb.AlterTableRequest(schema_name=s, table=retyped))).success


def java_reads_equal_delta(answer: dict, keys) -> list[int]:
    """Every read of one table by the Java reader equals delta-rs's read at the Delta version its snapshot's
    summary names (rows, column names, Arrow types; the Iceberg schema's types for the current one);
    the Java library's view of the metadata equals pyiceberg's. Returns the versions read."""
    path = answer["path"]
    py = iceberg_table(path)
    assert [(s["snapshot_id"], int(s["summary"][DELTA_VERSION])) for s in answer["snapshots"]] == \
        [(s.snapshot_id, int(s.summary[DELTA_VERSION])) for s in py.snapshots()], path
    assert answer["current_snapshot_id"] == py.current_snapshot().snapshot_id
    assert {f["name"]: f["id"] for f in answer["schema"]["fields"]} == {f.name: f.field_id for f in py.schema().fields}
    by_id = {s["snapshot_id"]: s for s in answer["snapshots"]}
    versions = []
    for read in answer["reads"]:
        assert "error" not in read, (path, read)
        snap = by_id[read["snapshot_id"] if read["snapshot_id"] is not None else answer["current_snapshot_id"]]
        v = int(snap["summary"][DELTA_VERSION])
        delta = as_iceberg_types(read_delta_table(path, version=v))
        java = pa.ipc.open_file(read["file"]).read_all()
        where = f"{path} snapshot {snap['snapshot_id']} (Delta version {v})"
        assert java.column_names == delta.column_names, (where, java.column_names, delta.column_names)
        assert [logical_type(f.type) for f in java.schema] == [logical_type(f.type) for f in delta.schema], \
            (where, java.schema, delta.schema)
        if read["snapshot_id"] is None:
            assert [(f["name"], f["type"]) for f in answer["schema"]["fields"]] == \
                [(f.name, iceberg_type(f.type)) for f in delta.schema], (where, answer["schema"])
        got = sorted(java.to_pylist(), key=lambda r: key_of(r, keys))
        want = sorted(delta.to_pylist(), key=lambda r: key_of(r, keys))
        assert got == want, f"the Java reader's rows differ from Delta at {where}"
        versions.append(v)
    return versions


def test_java_iceberg_reader_reads_what_delta_reads(java_reader, auto_server, spark_server, tmp_path):
    s = "java_reader"
    began = time.monotonic()
    drive_orders(auto_server.stub, s, tmp_path)
    drive_history(auto_server.stub, s, tmp_path)
    drove = time.monotonic() - began
    spark = spark_server
    drive_on_spark(spark.stub, s, tmp_path)
    on_spark = time.monotonic() - began - drove
    paths = {n: f"{auto_server.warehouse}/{s}/{n}" for n in ("orders", "orders_copy", "hist")}
    paths["sparked"] = f"{spark.warehouse}/{s}/sparked"
    answers = java_reader([{"path": paths["orders"], "all_snapshots": True},
                           {"path": paths["orders_copy"], "all_snapshots": False},
                           {"path": paths["hist"], "all_snapshots": True},
                           {"path": paths["sparked"], "all_snapshots": True}], tmp_path / "java")
    print(f"\nrequests on auto {drove:.1f} s, on spark (with its start) {on_spark:.1f} s, "
          f"the Java reader {time.monotonic() - began - drove - on_spark:.1f} s")
    got = {a["path"]: a for a in answers}
    for name, keys in (("orders", ("id",)), ("orders_copy", ("id",)), ("hist", ("id", "_fivetran_start")),
                       ("sparked", ("id",))):
        versions = java_reads_equal_delta(got[paths[name]], keys)
        newest = delta_version(paths[name])
        assert versions[0] == newest, (name, versions)
        if name != "orders_copy":                              # every kept snapshot, by its id
            kept = min(newest + 1, SNAPSHOTS_KEPT)
            assert sorted(versions[1:]) == list(range(newest + 1 - kept, newest + 1)), (name, versions)
    # What the requests left, as the Java reader sees it: the type changes, the rename, the default, the
    # NULL row and the soft deletes.
    fields = {f["name"]: f["type"] for f in got[paths["orders"]]["schema"]["fields"]}
    assert fields["n"] == "string" and "title" in fields and "name" not in fields and fields["qty"] == "int"
    current = pa.ipc.open_file(got[paths["orders"]]["reads"][0]["file"]).read_all().to_pylist()
    assert {r["region"] for r in current} == {"emea"}
    assert {r["id"] for r in current if r["_fivetran_deleted"]} == {16, 17, 18}
    assert next(r for r in current if r["id"] == 70)["amount"] is None
    assert {f["name"]: f["type"] for f in got[paths["sparked"]]["schema"]["fields"]}["n"] == "string"


def test_widenings_on_spark_stay_readable_by_icebergs_vectorized_reader(java_reader, spark_server, tmp_path):
    """Apache Spark widens SHORT and INT columns to LONG in place (Delta type widening): the old files keep
    INT32 (annotated INT(16) for a short). Iceberg's vectorized reader (Spark's default) reads the INT ones as
    long, but failed on the SHORT ones on 2026-12-03 (Iceberg 1.10.0: ClassCastException, BigIntVector to
    IntVector). So with `iceberg` on, a short widened to long rewrites the table (core/iceberg/promotions.py)
    and an int widened to long stays in place; both read right with either Iceberg reader. delta-rs
    refuses widened tables, so the rows are compared with what was written."""
    s = "java_widened"
    stub = spark_server.stub
    paths, want = {}, {}
    for name, typ, in_place in (("short_widened", "SHORT", False), ("int_widened", "INT", True)):
        w = table(name, col("id", "LONG", pk=True), col("qty", typ), col("_fivetran_synced", "UTC_DATETIME"))
        assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=w))).success
        write(stub, s, w, tmp_path, replace=[{"id": i, "qty": i - 3, "_fivetran_synced": SYNCED} for i in range(1, 6)])
        wider = table(name, *[c if c.name != "qty" else col("qty", "LONG") for c in w.columns])
        assert stub.AlterTable(on(pb.AlterTableRequest(schema_name=s, table=wider))).success
        write(stub, s, wider, tmp_path, replace=[{"id": 9, "qty": 2**40, "_fivetran_synced": SYNCED}])
        paths[name] = f"{spark_server.warehouse}/{s}/{name}"
        # widened in place (the log alone), or rewritten
        assert ("delta.enableTypeWidening" in read_delta_properties(paths[name])) == in_place, name
        want[name] = sorted([(i, i - 3) for i in range(1, 6)] + [(9, 2**40)])
    row_by_row = {"vectorization-enabled": "false"}
    answers = java_reader([{"path": paths["short_widened"], "options": row_by_row},
                           {"path": paths["int_widened"], "options": row_by_row},
                           {"path": paths["int_widened"]}, {"path": paths["short_widened"]}], tmp_path / "java")
    rows = lambda read: sorted((r["id"], r["qty"]) for r in pa.ipc.open_file(read["file"]).read_all().to_pylist())
    for answer in answers:
        assert {f["name"]: f["type"] for f in answer["schema"]["fields"]}["qty"] == "long"
        (read,) = answer["reads"]
        assert "error" not in read, (answer["path"], read)
        assert rows(read) == want[answer["path"].rsplit("/", 1)[1]], answer["path"]


def test_java_jdbc_catalog_loads_the_tables_by_name(auto_server, tmp_path):
    """With iceberg_catalog_uri a SQLite URL, Iceberg's own JdbcCatalog (over the same database, with
    Xerial's SQLite driver) loads each table by `<schema>.<table>` at the newest metadata file, every
    snapshot of it reads as Delta at its version, and a renamed table is found by its new name only."""
    if not (ROOT / READER_DIR / ".stamp").is_file():
        pytest.fail("the Iceberg Java reader environment is missing: run `make iceberg-reader` (make test-clients does)")
    s, db, stub = "java_catalog", tmp_path / "catalog.db", auto_server.stub
    cfg = {"iceberg_catalog_uri": f"sqlite:///{db}", "iceberg_catalog_name": "lake"}
    small = table("orders", col("id", "LONG", pk=True), col("name", "STRING"), col("amount", "DECIMAL", precision=10,
                                                                                   scale=2),
                  col("utc", "UTC_DATETIME"), col("_fivetran_synced", "UTC_DATETIME"))
    cut = lambda r: {k: v for k, v in r.items() if k in {c.name for c in small.columns}}
    for name in ("orders", "events"):
        assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=table(name, *small.columns)),
                                   cfg)).success
    write(stub, s, small, tmp_path, replace=[cut(row(i)) for i in range(1, 21)], config=cfg)
    write(stub, s, small, tmp_path, replace=[cut(row(i, name=f"new {i}")) for i in range(15, 31)],
          delete=[{"id": 2}], config=cfg)
    migrate(stub, s, "events", config=cfg, rename=pb.RenameOperation(
        rename_table=pb.RenameTable(from_table="events", to_table="events_v2")))
    catalogs = {"lake": {"type": "jdbc", "uri": f"jdbc:sqlite:{db}"}}
    answers = read_with_java([{"catalog": "lake", "identifier": [s, "orders"], "all_snapshots": True},
                              {"catalog": "lake", "identifier": [s, "events_v2"]}], tmp_path / "java", ROOT,
                             catalogs=catalogs)
    for answer, name in zip(answers, ("orders", "events_v2")):
        folder = f"{auto_server.warehouse}/{s}/{name}"
        assert answer["metadata_location"] == str(iceberg_table(folder).metadata_location), answer["metadata_location"]
        versions = java_reads_equal_delta({**answer, "path": folder}, ("id",))
        assert versions[0] == delta_version(folder)
    with pytest.raises(RuntimeError, match="TABLE_OR_VIEW_NOT_FOUND"):
        read_with_java([{"catalog": "lake", "identifier": [s, "events"]}], tmp_path / "java-old", ROOT,
                       catalogs=catalogs)
