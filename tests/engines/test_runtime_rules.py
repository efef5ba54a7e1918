"""Runtime rules from the SDK's guides (fivetran_partner_sdk's development-guide/) that have no
better home: Warning responses, and Parquet batch files honouring file_params.compression.
(128 MiB messages: test_server_process.py; history and migration rules: test_history_batch.py,
test_migrate.py; DescribeTable params and AlterTable widening: test_rpc_tables.py.)"""
from __future__ import annotations

import datetime as dt

import grpc
import pytest

from testkit.fivetran_requests import (NULL_STRING, UNMOD_STRING, batch_file, col, columns_of, describe, expect_error,
                                       table, write_request)
from testkit.batch_files import new_key, write_batch_file
from testkit.delta_read import delta_version, read_delta_table
from delta_destination.doors.fivetran._proto import common_pb2, destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.batch_files import Compression, Encryption, FileFormat
from delta_destination.doors.fivetran.convert import table_from_proto
from delta_destination.core.table_dirs import table_location
from delta_destination.warehouse import Warehouse

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)


def _table(name, *extra):
    return table(name, col("id", "INT", pk=True), *extra, col("_fivetran_synced", "UTC_DATETIME"),
                 col("_fivetran_deleted", "BOOLEAN"))


def _rows(server, schema, name):
    return {r["id"]: r for r in read_delta_table(table_location(Warehouse(str(server.warehouse)), schema, name)).to_pylist()}


# ---- Warning responses ------------------------------------------------------------------------------

def test_sub_microsecond_timestamps_are_stored_truncated_with_a_warning(stub, server, unique_schema, tmp_path):
    t = _table("ts", col("at", "UTC_DATETIME"), col("local", "NAIVE_DATETIME"))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=t)).success
    rows = [{"id": 1, "at": "2024-05-01T12:00:00.123456789Z", "local": "2024-05-01T12:00:00.1234567",
             "_fivetran_synced": T0, "_fivetran_deleted": False},
            {"id": 2, "at": "2024-05-01T12:00:00.1234560Z", "local": "2024-05-01T12:00:00",
             "_fivetran_synced": T0, "_fivetran_deleted": False}]
    r = stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, rows)]))
    assert r.WhichOneof("response") == "warning"  # the sync goes on; the customer is told
    msg = r.warning.message
    assert "'at'" in msg and "'local'" in msg and "finer than microseconds" in msg
    assert "123456789" not in msg and "12:00:00" not in msg  # never a value
    got = _rows(server, unique_schema, "ts")
    assert got[1]["at"] == dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert got[1]["local"] == dt.datetime(2024, 5, 1, 12, 0, 0, 123456)
    # a trailing zero beyond microseconds changes nothing: no warning
    rows2 = [{"id": 3, "at": "2024-05-01T12:00:00.1234560Z", "local": "2024-05-01T12:00:00.5",
              "_fivetran_synced": T0, "_fivetran_deleted": False}]
    assert stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, rows2)])).success


def test_primary_key_change_of_a_table_with_rows_warns(stub, server, unique_schema, tmp_path):
    t = _table("pk", col("code", "STRING"))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=t)).success
    rekeyed = table("pk", col("id", "INT", pk=True), col("code", "STRING", pk=True), col("_fivetran_synced", "UTC_DATETIME"),
                    col("_fivetran_deleted", "BOOLEAN"))
    # empty table: nothing stored can disagree with the new key
    assert stub.AlterTable(pb.AlterTableRequest(schema_name=unique_schema, table=rekeyed)).success
    assert stub.WriteBatch(write_request(unique_schema, rekeyed, replace=[batch_file(tmp_path, rekeyed, [
        {"id": 1, "code": "a", "_fivetran_synced": T0, "_fivetran_deleted": False}])])).success
    r = stub.AlterTable(pb.AlterTableRequest(schema_name=unique_schema, table=t))
    assert r.WhichOneof("response") == "warning"
    assert "primary key changed from (id, code) to (id)" in r.warning.message
    assert columns_of(describe(stub, unique_schema, "pk"))["code"] == ("STRING", False, None)  # the change was made


def test_add_column_with_default_keeps_an_existing_columns_type_with_a_warning(stub, server, unique_schema, tmp_path):
    t = _table("dflt", col("qty", "INT"))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=t)).success
    assert stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, [
        {"id": 1, "qty": 5, "_fivetran_synced": T0, "_fivetran_deleted": False}])])).success
    op = pb.AddOperation(add_column_with_default_value=pb.AddColumnWithDefaultValue(
        column="qty", column_type=common_pb2.LONG, default_value="424242"))
    r = stub.Migrate(pb.MigrateRequest(details=pb.MigrationDetails(schema=unique_schema, table="dflt", add=op)))
    assert r.WhichOneof("response") == "warning"
    assert "'qty' already exists as INT, not LONG" in r.warning.message and "424242" not in r.warning.message
    assert _rows(server, unique_schema, "dflt")[1]["qty"] == 424242
    same = pb.AddOperation(add_column_with_default_value=pb.AddColumnWithDefaultValue(
        column="qty", column_type=common_pb2.INT, default_value="8"))
    assert stub.Migrate(pb.MigrateRequest(details=pb.MigrationDetails(schema=unique_schema, table="dflt", add=same))).success


# ---- Parquet batch files: file_params.compression ------------------------------------------------------

def _parquet_request(tmp_path, schema, t, rows, written: Compression, declared: Compression):
    path = tmp_path / f"batch_{written.name}_{declared.name}.parquet.aes"
    key = new_key()
    header = list(rows[0])
    write_batch_file(path, header, [[r[h] for h in header] for r in rows], key=key, compression=written,
                     null_string=NULL_STRING, unmodified_string=UNMOD_STRING, file_format=FileFormat.PARQUET,
                     table=table_from_proto(t))
    return pb.WriteBatchRequest(schema_name=schema, table=t, keys={str(path): key}, replace_files=[str(path)],
                                file_params=pb.FileParams(compression=int(declared), encryption=int(Encryption.AES),
                                                          null_string=NULL_STRING, unmodified_string=UNMOD_STRING))


@pytest.mark.parametrize("compression", [Compression.OFF, Compression.ZSTD, Compression.GZIP], ids=lambda c: c.name)
def test_parquet_batches_honour_file_params_compression(parquet_server, tmp_path, compression):
    stub, schema = parquet_server.stub, f"pq_{compression.name.lower()}"
    t = _table("p", col("s", "STRING"))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=t)).success
    rows = [{"id": i, "s": f"v{i}", "_fivetran_synced": T0, "_fivetran_deleted": False} for i in range(1, 4)]
    assert stub.WriteBatch(_parquet_request(tmp_path, schema, t, rows, compression, compression)).success
    assert {i: r["s"] for i, r in _rows(parquet_server, schema, "p").items()} == {1: "v1", 2: "v2", 3: "v3"}
    # the same file announced with another compression is refused; the table is unchanged
    location = table_location(Warehouse(str(parquet_server.warehouse)), schema, "p")
    v = delta_version(location)
    wrong = Compression.OFF if compression != Compression.OFF else Compression.ZSTD
    err = expect_error(lambda: stub.WriteBatch(_parquet_request(tmp_path, schema, t, rows, compression, wrong)),
                       grpc.StatusCode.INVALID_ARGUMENT)
    assert "batch_" in err.details()  # names the file
    assert delta_version(location) == v


# ---- errors an operator can act on -------------------------------------------------------------------

def test_engine_failures_name_request_table_phase_and_class_never_values(server, engine, unique_schema, tmp_path):
    """A table whose data file vanished (removed by hand): the engine fails; the answer and the
    SEVERE log line say which request, table and phase, and the engine's error class."""
    import os

    stub = server.stub
    t = _table("Broken T", col("v", "STRING"))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=t)).success
    secret = "SECRET-c0ffee-value"
    row = {"id": 1, "v": secret, "_fivetran_synced": T0, "_fivetran_deleted": False}
    assert stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, [row])])).success
    location = table_location(Warehouse(str(server.warehouse)), unique_schema, "Broken T")
    removed = 0
    for folder, _dirs, files in os.walk(location):  # with column mapping, data files sit in prefix folders
        for f in files:
            if f.endswith(".parquet") and "_delta_log" not in folder:
                os.remove(os.path.join(folder, f))
                removed += 1
    assert removed
    err = expect_error(lambda: stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, [row])])),
                       grpc.StatusCode.INTERNAL)
    details = err.details()
    assert details.startswith(f"WriteBatch of table {unique_schema}.Broken T failed: ")
    # The first engine step that reads the table: the MERGE (Sail probes the keys first only on tables of
    # 16 MiB or more of Parquet; Spark never does).
    phase = "merge into"
    assert phase in details and "failed in the Spark engine (" in details and "Exception" in details
    assert secret not in details
    severe = [ln for ln in server.log_text().splitlines() if '"SEVERE"' in ln and unique_schema in ln]
    assert severe and "WriteBatch of table" in severe[-1] and phase in severe[-1]
    assert secret not in server.log_text()


def test_unexpected_failures_say_where_without_their_message():
    from delta_destination.names import quote_ident
    from delta_destination.doors.fivetran.servicer import raised_at, request_target

    try:
        quote_ident(None)  # AttributeError inside the package
    except AttributeError as exc:
        assert raised_at(exc).startswith("names.py:") and raised_at(exc).endswith("(quote_ident)")
    assert request_target(pb.WriteBatchRequest(schema_name="s", table=common_pb2.Table(name="T x"))) == " of table s.T x"
    assert request_target(pb.TruncateRequest(schema_name="s", table_name="t")) == " of table s.t"
    assert request_target(pb.MigrateRequest(details=pb.MigrationDetails(schema="s", table="t"))) == " of table s.t"
    assert request_target(common_pb2.TestRequest(name="x")) == ""


# ---- migrations: the soft-delete column may be another column than _fivetran_deleted ------------------

def test_sync_mode_migrations_with_another_soft_delete_column(stub, server, unique_schema, tmp_path):
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    t = table("Soft T", col("id", "INT", pk=True), col("Is Deleted", "BOOLEAN"), col("_fivetran_synced", "UTC_DATETIME"))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=t)).success
    rows = [{"id": 1, "Is Deleted": False, "_fivetran_synced": T0},
            {"id": 2, "Is Deleted": True, "_fivetran_synced": T0 - dt.timedelta(days=1)},
            {"id": 3, "Is Deleted": None, "_fivetran_synced": T0}]
    assert stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, rows)])).success

    def migrate(kind):
        op = pb.TableSyncModeMigrationOperation(type=getattr(pb, kind), soft_deleted_column="Is Deleted")
        r = stub.Migrate(pb.MigrateRequest(details=pb.MigrationDetails(schema=unique_schema, table="Soft T",
                                                                       table_sync_mode_migration=op)))
        assert r.WhichOneof("response") == "success", r

    migrate("SOFT_DELETE_TO_HISTORY")
    got = _rows(server, unique_schema, "Soft T")
    assert {i: (r["_fivetran_start"], r["_fivetran_active"], r["Is Deleted"]) for i, r in got.items()} == {
        1: (T0, True, False), 2: (epoch, False, True), 3: (T0, True, None)}  # the column is source data: kept
    assert got[2]["_fivetran_end"] == epoch
    assert columns_of(describe(stub, unique_schema, "Soft T"))["_fivetran_start"] == ("UTC_DATETIME", True, None)
    migrate("HISTORY_TO_SOFT_DELETE")
    got = _rows(server, unique_schema, "Soft T")
    assert {i: r["Is Deleted"] for i, r in got.items()} == {1: False, 2: True, 3: False}
    assert "_fivetran_start" not in columns_of(describe(stub, unique_schema, "Soft T"))
    assert "_fivetran_deleted" not in columns_of(describe(stub, unique_schema, "Soft T"))
