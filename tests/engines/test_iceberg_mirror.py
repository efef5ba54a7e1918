"""Every table readable as Iceberg too (setting iceberg=metadata; docs/iceberg.md): real gRPC calls
with real encrypted batch files to the session's server, each table then read with pyiceberg's own
scan and compared with delta-rs's read at the Delta version the Iceberg snapshot names (rows,
column names and types), after every kind of request; time travel by snapshot id; commits made
behind the mirror's back and a lost mirror converge on the next request."""
from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import pyarrow as pa
from deltalake import write_deltalake

from delta_destination.core.iceberg.plan import SNAPSHOTS_KEPT
from delta_destination.doors.fivetran._proto import common_pb2, destination_sdk_pb2 as pb
from testkit.delta_read import delta_version, read_delta_table
from testkit.fivetran_requests import batch_file, col, table, ts, write_request
from testkit.iceberg_read import assert_every_snapshot_matches, assert_in_step, iceberg_table, mirrored_version
from testkit.iceberg_requests import migrate, on, rows, small, write

UTC = dt.timezone.utc
T = table("orders", col("id", "LONG", pk=True), col("qty", "SHORT"), col("n", "INT"), col("name", "STRING"),
          col("amount", "DECIMAL", precision=10, scale=2), col("day", "NAIVE_DATE"), col("at", "NAIVE_DATETIME"),
          col("utc", "UTC_DATETIME"), col("raw", "BINARY"), col("doc", "JSON"), col("price", "DOUBLE"),
          col("ok", "BOOLEAN"), col("_fivetran_deleted", "BOOLEAN"), col("_fivetran_synced", "UTC_DATETIME"))


def row(i, **over):
    r = {"id": i, "qty": i % 7, "n": i * 10, "name": f"name {i}", "amount": Decimal(f"{i}.25"),
         "day": dt.date(2024, 1, 1 + i % 28), "at": dt.datetime(2024, 2, 3, 4, 5, 6, 7000),
         "utc": dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC), "raw": bytes([i % 256, 1, 2]),
         "doc": '{"a": %d}' % i, "price": i / 3, "ok": i % 2 == 0, "_fivetran_deleted": False,
         "_fivetran_synced": dt.datetime(2024, 6, 1, tzinfo=UTC)}
    r.update(over)
    return r


def small_table(stub, server, schema: str, name: str):
    """A created three-column table with Iceberg on, and its path."""
    t = small(name)
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=schema, table=t))).success
    return t, f"{server.warehouse}/{schema}/{name}"


def test_every_request_kind_mirrors_one_snapshot_per_delta_version(stub, server, unique_schema, tmp_path):
    s = unique_schema
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=T))).success
    path = f"{server.warehouse}/{s}/orders"
    assert_in_step(path)                                                 # an empty table, with its schema
    write(stub, s, T, tmp_path, replace=[row(i) for i in range(1, 41)])
    assert_in_step(path)
    write(stub, s, T, tmp_path, replace=[row(i, name=f"new {i}") for i in range(35, 61)])   # upserts, some new
    assert_in_step(path)
    write(stub, s, T, tmp_path, update=[{"id": i, "price": 1.5, "_fivetran_synced": dt.datetime(2024, 7, 1, tzinfo=UTC)}
                                        for i in range(1, 11)], update_columns=["id", "price", "_fivetran_synced"])
    assert_in_step(path)                                                 # partial updates
    write(stub, s, T, tmp_path, delete=[{"id": i, "_fivetran_synced": dt.datetime(2024, 7, 2, tzinfo=UTC)}
                                        for i in range(11, 16)])
    assert_in_step(path)                                                 # hard deletes
    write(stub, s, T, tmp_path, update=[{"id": i, "_fivetran_deleted": True} for i in range(16, 19)],
          update_columns=["id", "_fivetran_deleted"])
    assert_in_step(path)                                                 # soft deletes
    assert stub.Truncate(on(pb.TruncateRequest(schema_name=s, table_name="orders", synced_column="_fivetran_synced",
                                               utc_delete_before=ts(dt.datetime(2024, 6, 15, tzinfo=UTC))))).success
    assert read_delta_table(path).num_rows == 10                  # the rows synced after the cut
    assert_in_step(path)

    added = table("orders", *T.columns, col("note", "STRING"))
    assert stub.AlterTable(on(pb.AlterTableRequest(schema_name=s, table=added))).success
    assert_in_step(path)                                                 # add column
    write(stub, s, added, tmp_path, replace=[row(i, note=f"note {i}") for i in range(100, 105)])
    assert_in_step(path)
    retyped = table("orders", *[c if c.name != "n" else col("n", "STRING") for c in added.columns])
    assert stub.AlterTable(on(pb.AlterTableRequest(schema_name=s, table=retyped))).success
    assert_in_step(path)                                                 # type change: the table rewritten
    fields = {f.name: f for f in iceberg_table(path).schema().fields}
    assert str(fields["n"].field_type) == "string"
    migrate(stub, s, "orders", add=pb.AddOperation(add_column_with_default_value=pb.AddColumnWithDefaultValue(
        column="region", column_type=common_pb2.STRING, default_value="emea")))
    assert_in_step(path)
    migrate(stub, s, "orders", update_column_value=pb.UpdateColumnValueOperation(column="region", value="apac"))
    assert_in_step(path)

    ice = iceberg_table(path)
    snapshots = ice.snapshots()
    versions = assert_every_snapshot_matches(path)               # time travel by snapshot id
    newest = delta_version(path)                                  # one snapshot per Delta version, the newest kept
    assert versions == list(range(max(0, newest + 1 - SNAPSHOTS_KEPT), newest + 1)), versions
    ids = {f.name: f.field_id for f in ice.schema().fields}
    first = {f.name: f.field_id for f in ice.schemas()[min(ice.schemas())].fields}
    assert all(ids[n] == i for n, i in first.items() if n in ids), (first, ids)   # ids kept across changes
    assert len({s.snapshot_id for s in snapshots}) == len(snapshots)
    hint = open(os.path.join(path, "metadata", "version-hint.text")).read()
    assert os.path.exists(os.path.join(path, "metadata", f"v{hint}.metadata.json"))


def test_renamed_table_is_mirrored_at_its_new_place(stub, server, unique_schema, tmp_path):
    s = unique_schema
    assert stub.CreateTable(on(pb.CreateTableRequest(schema_name=s, table=T))).success
    write(stub, s, T, tmp_path, replace=[row(i) for i in range(1, 6)])
    migrate(stub, s, "orders", rename=pb.RenameOperation(rename_table=pb.RenameTable(from_table="orders",
                                                                                    to_table="orders_v2")))
    path = f"{server.warehouse}/{s}/orders_v2"
    assert_in_step(path)
    assert iceberg_table(path).metadata.location.rstrip("/") == path.rstrip("/")
    for f in iceberg_table(path).scan().plan_files():            # no file of the old place
        assert f.file.file_path.startswith(path + "/"), f.file.file_path


def test_commits_behind_the_mirrors_back_and_a_lost_mirror_converge(stub, server, unique_schema, tmp_path):
    s = unique_schema
    small, path = small_table(stub, server, s, "plain")
    write(stub, s, small, tmp_path, replace=rows(range(1, 11), "a"))
    before = assert_in_step(path)
    # Another writer: two appends with delta-rs, which the mirror never saw.
    schema = read_delta_table(path).schema
    for ids in (range(100, 103), range(200, 202)):
        write_deltalake(path, pa.Table.from_pylist(rows(ids, "other"), schema=schema), mode="append")
    assert mirrored_version(path) == before
    write(stub, s, small, tmp_path, replace=rows(range(5, 8), "b"))
    assert assert_in_step(path) == before + 3
    assert sorted(assert_every_snapshot_matches(path)) == list(range(max(0, before + 4 - SNAPSHOTS_KEPT), before + 4))
    # A crash between the Delta commit and the mirror: the newest Iceberg metadata is lost (the hint
    # still names it).
    meta = os.path.join(path, "metadata")
    newest = max(int(n[1:].split(".")[0]) for n in os.listdir(meta) if n.startswith("v") and n.endswith(".metadata.json"))
    os.remove(os.path.join(meta, f"v{newest}.metadata.json"))
    write(stub, s, small, tmp_path, replace=rows(range(1, 3), "c"))
    assert assert_in_step(path) == before + 4
    assert sorted(assert_every_snapshot_matches(path)) == list(range(max(0, before + 5 - SNAPSHOTS_KEPT), before + 5))


def test_iceberg_off_writes_no_metadata_folder(stub, server, unique_schema, tmp_path):
    s = unique_schema
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=s, table=T)).success
    req = write_request(s, T, replace=[batch_file(tmp_path, T, [row(i) for i in range(1, 4)])])
    assert stub.WriteBatch(req).success
    path = f"{server.warehouse}/{s}/orders"
    assert read_delta_table(path).num_rows == 3
    assert not os.path.exists(os.path.join(path, "metadata"))


def test_a_failing_mirror_leaves_the_request_and_its_delta_commit_standing(stub, server, unique_schema, tmp_path):
    """Decided (docs/iceberg.md): the mirror never fails or undoes the Delta commit. Here it fails for
    real (the table's `metadata` is a file, not a folder): the request succeeds, the Delta table has
    the batch, the log says so without values, and the next request after the cause is gone catches
    the Iceberg side up with every version."""
    s = unique_schema
    small, path = small_table(stub, server, s, "fails")
    write(stub, s, small, tmp_path, replace=rows(range(1, 6), "a"))
    before = assert_in_step(path)
    meta = os.path.join(path, "metadata")
    os.rename(meta, meta + ".aside")
    open(meta, "w").close()
    write(stub, s, small, tmp_path, replace=rows(range(4, 9), "secret-value"))
    assert read_delta_table(path).num_rows == 8 and delta_version(path) == before + 1
    log = server.log_text()
    assert f"{s}.fails: Iceberg metadata not updated (" in log, log[-2000:]
    assert "secret-value" not in log
    os.remove(meta)
    os.rename(meta + ".aside", meta)
    assert mirrored_version(path) == before
    write(stub, s, small, tmp_path, replace=rows(range(9, 11), "c"))
    assert assert_in_step(path) == before + 2
    assert sorted(assert_every_snapshot_matches(path))[-3:] == [before, before + 1, before + 2]
