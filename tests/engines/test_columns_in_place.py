"""Renamed and dropped columns through real gRPC, on each engine, read back with delta-rs.

On Apache Spark + Delta a table with column mapping (every table the Spark engine creates)
renames and drops columns in place: the schema commit is ALTER TABLE RENAME COLUMN / DROP
COLUMNS, with no data file added or removed. Sail rewrites the table in one overwrite
commit. Either way the request's commits are: the metadata property, ONE schema commit,
the metadata property, and the Fivetran types, keys and values come back unchanged.
"""
from __future__ import annotations

import datetime as dt
import json

import grpc

from testkit.fivetran_requests import batch_file, col, columns_of, describe, expect_error, table, write_request
from testkit.delta_read import commit_kinds, commits_kinds, delta_properties, delta_version, read_delta_table
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb

UTC = dt.timezone.utc
SYNC1 = dt.datetime(2024, 1, 1, 10, 0, tzinfo=UTC)
SYNC2 = dt.datetime(2024, 1, 2, 10, 0, tzinfo=UTC)

KEY = "a b,c=d"            # needs column mapping on Delta (space, comma, =)
NEW_KEY = "new `name` é"   # backticks and non-ASCII
ODD = "Größe (cm)"         # an odd name that stays: kept in the statistics list


def is_metadata_only(c):
    return not ({"add", "remove"} & c[1])


def stored_columns(path):
    return [c["name"] for c in json.loads(delta_properties(path)["fivetran.schema"])["columns"]]


def write(stub, schema, tproto, rows, tmp_path):
    assert stub.WriteBatch(write_request(schema, tproto, replace=[batch_file(tmp_path, tproto, rows)])).success


def ok(resp):
    assert resp.WhichOneof("response") == "success", resp


def rename(stub, schema, name, old, new):
    return stub.Migrate(pb.MigrateRequest(details=pb.MigrationDetails(
        schema=schema, table=name, rename=pb.RenameOperation(rename_column=pb.RenameColumn(from_column=old, to_column=new)))))


def alter(stub, schema, tproto, drop=True):
    return stub.AlterTable(pb.AlterTableRequest(schema_name=schema, table=tproto, drop_columns=drop))


def rows_of(path, key):
    return sorted(read_delta_table(path).to_pylist(), key=lambda r: r[key])


def test_rename_column(stub, server, engine, unique_schema, tmp_path):
    t = table("ren", col(KEY, "INT", pk=True), col("j", "JSON"), col(ODD, "STRING", sbl=40),
              col("_fivetran_synced", "UTC_DATETIME"))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=t)).success
    path = f"{server.warehouse}/{unique_schema}/ren"
    write(stub, unique_schema, t, [{KEY: 1, "j": '{"a":1}', ODD: "x", "_fivetran_synced": SYNC1},
                                   {KEY: 2, "j": None, ODD: "y", "_fivetran_synced": SYNC1}], tmp_path)
    v = delta_version(path)
    ok(rename(stub, unique_schema, "ren", KEY, NEW_KEY))
    after = delta_version(path)
    made = commits_kinds(path, v + 1, after)
    assert len(made) == 3 and is_metadata_only(made[0]) and is_metadata_only(made[2]), made  # the metadata property
    if engine == "spark":
        assert made[1] == ("RENAME COLUMN", {"metaData"}), made  # in place: no data file added or removed
    else:
        assert made[1][0] == "WRITE" and {"add", "remove"} <= made[1][1], made  # one overwrite
    got = columns_of(describe(stub, unique_schema, "ren"))
    assert list(got) == [NEW_KEY, "j", ODD, "_fivetran_synced"]
    assert got[NEW_KEY] == ("INT", True, None) and got["j"] == ("JSON", False, None) and got[ODD] == ("STRING", False, 40)
    assert stored_columns(path) == [NEW_KEY, "j", ODD, "_fivetran_synced"]  # the metadata names no vanished column
    assert [(r[NEW_KEY], r["j"], r[ODD]) for r in rows_of(path, NEW_KEY)] == [(1, '{"a":1}', "x"), (2, None, "y")]
    ok(rename(stub, unique_schema, "ren", KEY, NEW_KEY))  # replay: success, nothing written
    assert delta_version(path) == after
    expect_error(lambda: rename(stub, unique_schema, "ren", NEW_KEY, "j"), grpc.StatusCode.INVALID_ARGUMENT)
    expect_error(lambda: rename(stub, unique_schema, "ren", "nope", "nope2"), grpc.StatusCode.INVALID_ARGUMENT)
    assert delta_version(path) == after
    # the renamed key takes upserts: one row updated, one inserted
    t2 = table("ren", col(NEW_KEY, "INT", pk=True), col("j", "JSON"), col(ODD, "STRING", sbl=40),
               col("_fivetran_synced", "UTC_DATETIME"))
    write(stub, unique_schema, t2, [{NEW_KEY: 2, "j": "[]", ODD: "y2", "_fivetran_synced": SYNC2},
                                    {NEW_KEY: 3, "j": None, ODD: "z", "_fivetran_synced": SYNC2}], tmp_path)
    assert [(r[NEW_KEY], r["j"], r[ODD]) for r in rows_of(path, NEW_KEY)] == \
        [(1, '{"a":1}', "x"), (2, "[]", "y2"), (3, None, "z")]
    # a case-only rename: Delta refuses it in place, so it is a rewrite on both engines
    v = delta_version(path)
    ok(rename(stub, unique_schema, "ren", "j", "J"))
    assert commit_kinds(path, v + 2)[0] == "WRITE"
    assert list(columns_of(describe(stub, unique_schema, "ren"))) == [NEW_KEY, "J", ODD, "_fivetran_synced"]
    assert [r["J"] for r in rows_of(path, NEW_KEY)] == ['{"a":1}', "[]", None]


def test_alter_drops_columns(stub, server, engine, unique_schema, tmp_path):
    cols = [col("id", "INT", pk=True), col("a b", "STRING"), col("c=d", "LONG"), col(ODD, "STRING"),
            col("amount", "DECIMAL", precision=20, scale=4), col("_fivetran_synced", "UTC_DATETIME")]
    t = table("drp", *cols)
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=unique_schema, table=t)).success
    path = f"{server.warehouse}/{unique_schema}/drp"
    from decimal import Decimal

    write(stub, unique_schema, t, [
        {"id": 1, "a b": "x", "c=d": 10, ODD: "o1", "amount": Decimal("1.5"), "_fivetran_synced": SYNC1},
        {"id": 2, "a b": "y", "c=d": 20, ODD: "o2", "amount": None, "_fivetran_synced": SYNC1}], tmp_path)
    kept = [cols[0], cols[3], cols[4], cols[5]]
    v = delta_version(path)
    assert alter(stub, unique_schema, table("drp", *kept)).success
    after = delta_version(path)
    made = commits_kinds(path, v + 1, after)
    schema_commits = [c for c in made if not (c[0] == "SET TBLPROPERTIES" and c[1] == {"metaData"})]
    if engine == "spark":
        assert schema_commits == [("DROP COLUMNS", {"metaData"})], made
    else:
        assert len(schema_commits) == 1 and schema_commits[0][0] == "WRITE", made
    assert len(made) <= 3, made
    got = columns_of(describe(stub, unique_schema, "drp"))
    assert got == {"id": ("INT", True, None), ODD: ("STRING", False, None), "amount": ("DECIMAL", False, (20, 4)),
                   "_fivetran_synced": ("UTC_DATETIME", False, None)}
    assert stored_columns(path) == ["id", ODD, "amount", "_fivetran_synced"]
    stats = delta_properties(path)["delta.dataSkippingStatsColumns"]
    assert stats == f"`id`,`{ODD}`,`_fivetran_synced`"  # the full list is back after the drop
    data = rows_of(path, "id")
    assert [sorted(r) for r in data] == [sorted(["id", ODD, "amount", "_fivetran_synced"])] * 2
    assert [(r["id"], r[ODD], r["amount"]) for r in data] == [(1, "o1", Decimal("1.5000")), (2, "o2", None)]
    assert alter(stub, unique_schema, table("drp", *kept)).success  # replay: nothing written
    assert delta_version(path) == after
    # upserts after the drop
    t2 = table("drp", *kept)
    write(stub, unique_schema, t2, [{"id": 2, ODD: "o2b", "amount": Decimal("2"), "_fivetran_synced": SYNC2},
                                    {"id": 3, ODD: "o3", "amount": None, "_fivetran_synced": SYNC2}], tmp_path)
    assert [(r["id"], r[ODD], r["amount"]) for r in rows_of(path, "id")] == \
        [(1, "o1", Decimal("1.5000")), (2, "o2b", Decimal("2.0000")), (3, "o3", None)]
    # drop one column and add one under a dropped column's name: the old values do not come back
    readded = [cols[0], cols[3], col("a b", "INT"), cols[5]]
    v = delta_version(path)
    assert alter(stub, unique_schema, table("drp", *readded)).success
    made = commits_kinds(path, v + 1, delta_version(path))
    # drop + add is one rewrite on both engines (Delta has no single in-place statement for both)
    assert [c[0] for c in made if not is_metadata_only(c)] == ["WRITE"], made
    assert list(columns_of(describe(stub, unique_schema, "drp"))) == ["id", ODD, "_fivetran_synced", "a b"]
    assert [(r["id"], r["a b"]) for r in rows_of(path, "id")] == [(1, None), (2, None), (3, None)]
    # a type change with a drop is one rewrite on both engines
    v = delta_version(path)
    assert alter(stub, unique_schema, table("drp", col("id", "LONG", pk=True), cols[3], cols[5])).success
    made = commits_kinds(path, v + 1, delta_version(path))
    assert [c[0] for c in made if not is_metadata_only(c)] == ["WRITE"], made
    assert [(r["id"], r[ODD]) for r in rows_of(path, "id")] == [(1, "o1"), (2, "o2b"), (3, "o3")]
    assert columns_of(describe(stub, unique_schema, "drp"))["id"] == ("LONG", True, None)
