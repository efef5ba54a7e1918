"""Migrate (schema migrations) through real gRPC against real Delta tables, read back with delta-rs."""
from __future__ import annotations

import datetime as dt

import grpc

from testkit.fivetran_requests import (ON_BOTH_STORAGES, batch_file, col, columns_of, describe, entries_of,
                                       expect_error, files_under, table, write_request)
from testkit.delta_read import delta_version, read_delta_table
from delta_destination.doors.fivetran._proto import common_pb2, destination_sdk_pb2 as pb

UTC = dt.timezone.utc
MAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
MS = dt.timedelta(milliseconds=1)
OP_TS = "2005-05-28T20:57:00Z"
T_OP = dt.datetime(2005, 5, 28, 20, 57, tzinfo=UTC)
SYNC1 = dt.datetime(2024, 1, 1, 10, 0, tzinfo=UTC)
SYNC2 = dt.datetime(2024, 1, 2, 10, 0, 0, 123000, tzinfo=UTC)


def d(day, h=20, m=57):
    return dt.datetime(2005, 5, day, h, m, tzinfo=UTC)


# the tester's tables (schema_migrations_input_*.json) plus the system columns
LIVE = table(
    "transaction",
    col("id", "INT", pk=True), col("amount", "DOUBLE"), col("desc", "STRING"),
    col("_fivetran_synced", "UTC_DATETIME"), col("_fivetran_deleted", "BOOLEAN"),
)
LIVE_ROWS = [
    {"id": 1, "amount": 100.45, "desc": None, "_fivetran_synced": SYNC1, "_fivetran_deleted": False},
    {"id": 2, "amount": 150.33, "desc": "two", "_fivetran_synced": SYNC1, "_fivetran_deleted": False},
    {"id": 3, "amount": 150.33, "desc": "two", "_fivetran_synced": SYNC2, "_fivetran_deleted": True},
    {"id": 10, "amount": 200.0, "desc": "three", "_fivetran_synced": SYNC1, "_fivetran_deleted": False},
    {"id": 20, "amount": 50.0, "desc": "money", "_fivetran_synced": SYNC1, "_fivetran_deleted": None},
]
HIST = table(
    "transaction_history",
    col("id", "INT", pk=True), col("amount", "DOUBLE"), col("desc", "STRING"),
    col("_fivetran_start", "UTC_DATETIME", pk=True), col("_fivetran_end", "UTC_DATETIME"),
    col("_fivetran_active", "BOOLEAN"), col("_fivetran_synced", "UTC_DATETIME"),
)


def version(i, amount, desc, start, end=MAX, active=True):
    return {"id": i, "amount": amount, "desc": desc, "_fivetran_start": start, "_fivetran_end": end,
            "_fivetran_active": active, "_fivetran_synced": start}


HIST_ROWS = [
    version(1, 100.45, None, d(23)), version(2, 150.33, "two", d(23)), version(3, 150.33, "two", d(23)),
    version(4, 150.33, "two", d(23)),
    version(10, 200.0, "three", d(26), d(26, 20, 58) - MS, False), version(10, 100.0, "three", d(26, 20, 58)),
    version(20, 50.0, "money", d(26, 21, 57)),
]


# ---- helpers --------------------------------------------------------------------------------------
def migrate(stub, schema, tbl, **operation):
    return stub.Migrate(pb.MigrateRequest(details=pb.MigrationDetails(schema=schema, table=tbl, **operation)))


def ok(resp):
    assert resp.WhichOneof("response") == "success", resp
    return resp


def make(stub, server, schema, tproto, rows, tmp_path, name=None):
    if name:
        tproto = common_pb2.Table(name=name, columns=list(tproto.columns))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=tproto)).success
    if rows:
        req = write_request(schema, tproto, replace=[batch_file(tmp_path, tproto, rows)])
        assert stub.WriteBatch(req).success
    return path(server, schema, tproto.name)


def path(server, schema, name):
    return f"{server.warehouse}/{schema}/{name}"


def rows(server, schema, name, *keys):
    got = read_delta_table(path(server, schema, name)).to_pylist()
    keys = keys or ("id",)
    return sorted(got, key=lambda r: tuple(r[k] for k in keys))


def hrows(server, schema, name, *cols):
    """History rows as tuples (id, start, end, active, *cols), sorted."""
    return sorted((r["id"], r["_fivetran_start"], r["_fivetran_end"], r["_fivetran_active"], *[r[c] for c in cols])
                  for r in read_delta_table(path(server, schema, name)).to_pylist())


def add_default(column, typ, value):
    return {"add": pb.AddOperation(add_column_with_default_value=pb.AddColumnWithDefaultValue(
        column=column, column_type=getattr(common_pb2, typ), default_value=value))}


def add_hist(column, typ, value, ts=OP_TS):
    return {"add": pb.AddOperation(add_column_in_history_mode=pb.AddColumnInHistoryMode(
        column=column, column_type=getattr(common_pb2, typ), default_value=value, operation_timestamp=ts))}


def drop_hist(column, ts=OP_TS):
    return {"drop": pb.DropOperation(drop_column_in_history_mode=pb.DropColumnInHistoryMode(column=column, operation_timestamp=ts))}


def sync_mode(kind, soft="_fivetran_deleted"):
    op = pb.TableSyncModeMigrationOperation(type=getattr(pb, kind))
    if soft is not None:
        op.soft_deleted_column = soft
    return {"table_sync_mode_migration": op}


def update_value(column, value):
    return {"update_column_value": pb.UpdateColumnValueOperation(column=column, value=value)}


# ---- drop / rename / copy table ---------------------------------------------------------------------
@ON_BOTH_STORAGES
def test_drop_table_and_replay(stub, server, unique_schema, tmp_path):
    p = make(stub, server, unique_schema, LIVE, LIVE_ROWS, tmp_path)
    ok(migrate(stub, unique_schema, "transaction", drop=pb.DropOperation(drop_table=True)))
    assert files_under(server, p) == []
    assert describe(stub, unique_schema, "transaction").not_found
    assert files_under(server, f"{server.warehouse}/_fivetran_trash") == []
    ok(migrate(stub, unique_schema, "transaction", drop=pb.DropOperation(drop_table=True)))  # replay
    # the name is free again: a new table there starts empty
    make(stub, server, unique_schema, LIVE, [], tmp_path)
    assert rows(server, unique_schema, "transaction") == []


@ON_BOTH_STORAGES
def test_rename_table_and_replay(stub, server, unique_schema, tmp_path):
    make(stub, server, unique_schema, LIVE, LIVE_ROWS, tmp_path)
    before = rows(server, unique_schema, "transaction")
    cols = columns_of(describe(stub, unique_schema, "transaction"))
    op = {"rename": pb.RenameOperation(rename_table=pb.RenameTable(from_table="transaction", to_table="renamed"))}
    ok(migrate(stub, unique_schema, "transaction", **op))
    assert describe(stub, unique_schema, "transaction").not_found
    assert columns_of(describe(stub, unique_schema, "renamed")) == cols
    assert rows(server, unique_schema, "renamed") == before
    ok(migrate(stub, unique_schema, "transaction", **op))  # replay: source gone, target there
    assert rows(server, unique_schema, "renamed") == before
    # the renamed table takes writes
    t = common_pb2.Table(name="renamed", columns=list(LIVE.columns))
    new = dict(LIVE_ROWS[0], id=99)
    assert stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, [new])])).success
    assert [r["id"] for r in rows(server, unique_schema, "renamed")] == [1, 2, 3, 10, 20, 99]
    missing = {"rename": pb.RenameOperation(rename_table=pb.RenameTable(from_table="nope", to_table="nope2"))}
    expect_error(lambda: migrate(stub, unique_schema, "nope", **missing), grpc.StatusCode.NOT_FOUND)


@ON_BOTH_STORAGES
def test_rename_onto_existing_table_changes_nothing(stub, server, unique_schema, tmp_path):
    pa_ = make(stub, server, unique_schema, LIVE, LIVE_ROWS, tmp_path, name="a")
    pb_ = make(stub, server, unique_schema, LIVE, LIVE_ROWS[:2], tmp_path, name="b")
    va, vb = delta_version(pa_), delta_version(pb_)
    op = {"rename": pb.RenameOperation(rename_table=pb.RenameTable(from_table="a", to_table="b"))}
    err = expect_error(lambda: migrate(stub, unique_schema, "a", **op), grpc.StatusCode.ALREADY_EXISTS)
    assert "already exists" in err.details()
    assert (delta_version(pa_), delta_version(pb_)) == (va, vb)
    assert len(rows(server, unique_schema, "a")) == 5 and len(rows(server, unique_schema, "b")) == 2


@ON_BOTH_STORAGES
def test_copy_table_and_replay(stub, server, unique_schema, tmp_path):
    src = make(stub, server, unique_schema, LIVE, LIVE_ROWS, tmp_path)
    op = {"copy": pb.CopyOperation(copy_table=pb.CopyTable(from_table="transaction", to_table="transaction_new"))}
    ok(migrate(stub, unique_schema, "transaction", **op))
    dst = path(server, unique_schema, "transaction_new")
    assert rows(server, unique_schema, "transaction_new") == rows(server, unique_schema, "transaction")
    assert columns_of(describe(stub, unique_schema, "transaction_new")) == columns_of(describe(stub, unique_schema, "transaction"))
    assert delta_version(dst) == 0  # data, schema and metadata in one commit
    assert not [n for n in entries_of(server, dst.rsplit("/", 1)[0]) if n.startswith(".")]  # no temporary left
    ok(migrate(stub, unique_schema, "transaction", **op))  # replay recognises its own copy
    assert delta_version(dst) == 0
    # the source changes: the same copy onto the existing table is now a conflict, nothing changes
    ok(migrate(stub, unique_schema, "transaction", **update_value("desc", "x")))
    expect_error(lambda: migrate(stub, unique_schema, "transaction", **op), grpc.StatusCode.ALREADY_EXISTS)
    assert delta_version(dst) == 0 and delta_version(src) > 1
    # an empty table copies too
    make(stub, server, unique_schema, LIVE, [], tmp_path, name="empty")
    ok(migrate(stub, unique_schema, "empty", copy=pb.CopyOperation(copy_table=pb.CopyTable(from_table="empty", to_table="empty2"))))
    assert rows(server, unique_schema, "empty2") == []
    assert columns_of(describe(stub, unique_schema, "empty2")) == columns_of(describe(stub, unique_schema, "empty"))
    expect_error(lambda: migrate(stub, unique_schema, "x", copy=pb.CopyOperation(copy_table=pb.CopyTable(
        from_table="missing", to_table="x2"))), grpc.StatusCode.NOT_FOUND)


# ---- columns --------------------------------------------------------------------------------------
ODD = "a b,c=d"
ODD2 = "new name, with = and ;"


@ON_BOTH_STORAGES
def test_rename_column_with_odd_names_and_replay(stub, server, unique_schema, tmp_path):
    t = table("odd", col(ODD, "INT", pk=True), col("j", "JSON"), col("_fivetran_synced", "UTC_DATETIME"))
    p = make(stub, server, unique_schema, t, [{ODD: 1, "j": '{"a":1}', "_fivetran_synced": SYNC1},
                                               {ODD: 2, "j": None, "_fivetran_synced": SYNC1}], tmp_path)
    v = delta_version(p)
    op = {"rename": pb.RenameOperation(rename_column=pb.RenameColumn(from_column=ODD, to_column=ODD2))}
    ok(migrate(stub, unique_schema, "odd", **op))
    got = columns_of(describe(stub, unique_schema, "odd"))
    assert list(got) == [ODD2, "j", "_fivetran_synced"]
    assert got[ODD2] == ("INT", True, None) and got["j"] == ("JSON", False, None)  # key and exact type kept
    assert [(r[ODD2], r["j"]) for r in rows(server, unique_schema, "odd", ODD2)] == [(1, '{"a":1}'), (2, None)]
    after = delta_version(p)
    assert after == v + 3  # metadata (superset), ONE data commit with the new schema, metadata (exact)
    ok(migrate(stub, unique_schema, "odd", **op))  # replay
    assert delta_version(p) == after
    # the renamed key column takes upserts
    t2 = table("odd", col(ODD2, "INT", pk=True), col("j", "JSON"), col("_fivetran_synced", "UTC_DATETIME"))
    req = write_request(unique_schema, t2, replace=[batch_file(tmp_path, t2, [{ODD2: 2, "j": "[]", "_fivetran_synced": SYNC2}])])
    assert stub.WriteBatch(req).success
    assert [(r[ODD2], r["j"]) for r in rows(server, unique_schema, "odd", ODD2)] == [(1, '{"a":1}'), (2, "[]")]
    expect_error(lambda: migrate(stub, unique_schema, "odd", rename=pb.RenameOperation(rename_column=pb.RenameColumn(
        from_column="nope", to_column="nope2"))), grpc.StatusCode.INVALID_ARGUMENT)
    expect_error(lambda: migrate(stub, unique_schema, "odd", rename=pb.RenameOperation(rename_column=pb.RenameColumn(
        from_column=ODD2, to_column="j"))), grpc.StatusCode.INVALID_ARGUMENT)


@ON_BOTH_STORAGES
def test_copy_column_and_replay(stub, server, unique_schema, tmp_path):
    p = make(stub, server, unique_schema, LIVE, LIVE_ROWS, tmp_path)
    op = {"copy": pb.CopyOperation(copy_column=pb.CopyColumn(from_column="desc", to_column="desc_detailed"))}
    ok(migrate(stub, unique_schema, "transaction", **op))
    got = rows(server, unique_schema, "transaction")
    assert [(r["desc"], r["desc_detailed"]) for r in got] == [(None, None), ("two", "two"), ("two", "two"), ("three", "three"), ("money", "money")]
    assert columns_of(describe(stub, unique_schema, "transaction"))["desc_detailed"] == ("STRING", False, None)
    v = delta_version(p)
    ok(migrate(stub, unique_schema, "transaction", **op))  # replay: nothing differs, no commit
    assert delta_version(p) == v
    ok(migrate(stub, unique_schema, "transaction", **update_value("desc_detailed", "changed")))
    ok(migrate(stub, unique_schema, "transaction", **op))  # existing target column: values copied again
    assert [r["desc_detailed"] for r in rows(server, unique_schema, "transaction")] == [None, "two", "two", "three", "money"]


@ON_BOTH_STORAGES
def test_add_column_with_default_value(stub, server, unique_schema, tmp_path):
    p = make(stub, server, unique_schema, LIVE, LIVE_ROWS, tmp_path)
    v = delta_version(p)
    op = add_default("operation_time", "UTC_DATETIME", "2005-05-28T20:57:00Z")
    ok(migrate(stub, unique_schema, "transaction", **op))
    assert [r["operation_time"] for r in rows(server, unique_schema, "transaction")] == [T_OP] * 5
    assert columns_of(describe(stub, unique_schema, "transaction"))["operation_time"] == ("UTC_DATETIME", False, None)
    assert delta_version(p) == v + 2  # metadata, then column + values in ONE commit
    ok(migrate(stub, unique_schema, "transaction", **op))  # replay: every row has it already
    assert delta_version(p) == v + 2
    # the column exists: the default is still set on every row
    ok(migrate(stub, unique_schema, "transaction", **update_value("operation_time", "2001-01-01T00:00:00Z")))
    ok(migrate(stub, unique_schema, "transaction", **op))
    assert [r["operation_time"] for r in rows(server, unique_schema, "transaction")] == [T_OP] * 5
    # typed defaults parse like batch files; a value that does not fit names no value
    ok(migrate(stub, unique_schema, "transaction", **add_default("price", "DECIMAL", "12.5")))
    ok(migrate(stub, unique_schema, "transaction", **add_default("day", "NAIVE_DATE", "2007-12-03")))
    got = rows(server, unique_schema, "transaction")
    assert {str(r["price"]) for r in got} == {"12.5000000000"} and {str(r["day"]) for r in got} == {"2007-12-03"}
    err = expect_error(lambda: migrate(stub, unique_schema, "transaction", **add_default("n", "INT", "secret-xyz")),
                       grpc.StatusCode.INVALID_ARGUMENT)
    assert "secret-xyz" not in err.details()
    assert describe(stub, unique_schema, "transaction").table.columns[-1].name == "day"


@ON_BOTH_STORAGES
def test_add_column_with_default_on_empty_table(stub, server, unique_schema, tmp_path):
    make(stub, server, unique_schema, LIVE, [], tmp_path)
    ok(migrate(stub, unique_schema, "transaction", **add_default("flag", "BOOLEAN", "true")))
    assert rows(server, unique_schema, "transaction") == []
    assert columns_of(describe(stub, unique_schema, "transaction"))["flag"] == ("BOOLEAN", False, None)


@ON_BOTH_STORAGES
def test_update_column_value_and_null(stub, server, unique_schema, tmp_path):
    p = make(stub, server, unique_schema, LIVE, LIVE_ROWS, tmp_path)
    ok(migrate(stub, unique_schema, "transaction", **update_value("amount", "202.57")))
    assert [r["amount"] for r in rows(server, unique_schema, "transaction")] == [202.57] * 5
    v = delta_version(p)
    ok(migrate(stub, unique_schema, "transaction", **update_value("amount", "202.57")))  # replay: no commit
    assert delta_version(p) == v
    ok(migrate(stub, unique_schema, "transaction", **update_value("desc", "NULL")))  # set_column_to_null
    assert [r["desc"] for r in rows(server, unique_schema, "transaction")] == [None] * 5
    assert [r["amount"] for r in rows(server, unique_schema, "transaction")] == [202.57] * 5
    expect_error(lambda: migrate(stub, unique_schema, "transaction", **update_value("nope", "1")), grpc.StatusCode.INVALID_ARGUMENT)
    expect_error(lambda: migrate(stub, unique_schema, "missing", **update_value("desc", "1")), grpc.StatusCode.NOT_FOUND)
    # an empty table
    make(stub, server, unique_schema, LIVE, [], tmp_path, name="empty")
    ok(migrate(stub, unique_schema, "empty", **update_value("amount", "1.5")))
    assert rows(server, unique_schema, "empty") == []


# ---- history mode columns ----------------------------------------------------------------------
@ON_BOTH_STORAGES
def test_history_add_then_drop_same_timestamp_record_history_once(stub, server, unique_schema, tmp_path):
    p = make(stub, server, unique_schema, HIST, HIST_ROWS, tmp_path)
    ok(migrate(stub, unique_schema, "transaction_history", **add_hist("article", "STRING", "Ordered article")))
    closed, new = T_OP - MS, T_OP
    expect_after_add = sorted(
        [(1, d(23), closed, False, None, None), (2, d(23), closed, False, "two", None), (3, d(23), closed, False, "two", None),
         (4, d(23), closed, False, "two", None), (10, d(26), d(26, 20, 58) - MS, False, "three", None),
         (10, d(26, 20, 58), closed, False, "three", None), (20, d(26, 21, 57), closed, False, "money", None)]
        + [(i, new, MAX, True, desc, "Ordered article") for i, desc in
           ((1, None), (2, "two"), (3, "two"), (4, "two"), (10, "three"), (20, "money"))])
    assert hrows(server, unique_schema, "transaction_history", "desc", "article") == expect_after_add
    got = {(r["id"], r["_fivetran_start"]): r for r in read_delta_table(p).to_pylist()}
    assert got[(10, new)]["amount"] == 100.0 and got[(10, new)]["_fivetran_synced"] == d(26, 20, 58)  # copied from the active version
    cols = columns_of(describe(stub, unique_schema, "transaction_history"))
    assert cols["article"] == ("STRING", False, None) and cols["_fivetran_start"] == ("UTC_DATETIME", True, None)
    v = delta_version(p)
    ok(migrate(stub, unique_schema, "transaction_history", **add_hist("article", "STRING", "Ordered article")))  # replay
    assert delta_version(p) == v

    # a second migration with the same timestamp updates the versions at that timestamp in place
    ok(migrate(stub, unique_schema, "transaction_history", **drop_hist("desc")))
    expect_after_drop = [r[:4] + ((None,) + r[5:] if r[1] == new else r[4:]) for r in expect_after_add]
    assert hrows(server, unique_schema, "transaction_history", "desc", "article") == sorted(expect_after_drop)
    assert "desc" in columns_of(describe(stub, unique_schema, "transaction_history"))  # kept in history mode
    v = delta_version(p)
    ok(migrate(stub, unique_schema, "transaction_history", **drop_hist("desc")))  # replay
    ok(migrate(stub, unique_schema, "transaction_history", **add_hist("article", "STRING", "Ordered article")))
    assert delta_version(p) == v
    assert len(read_delta_table(p)) == 13


@ON_BOTH_STORAGES
def test_history_add_column_converges_after_a_crash_between_schema_and_data(stub, server, unique_schema, tmp_path):
    """The column is added in its own commit before the MERGE: a crash in between leaves the
    column with NULLs everywhere; the replay must give the same table as an uninterrupted run."""
    make(stub, server, unique_schema, HIST, HIST_ROWS, tmp_path, name="clean")
    make(stub, server, unique_schema, HIST, HIST_ROWS, tmp_path, name="crashed")
    ok(migrate(stub, unique_schema, "clean", **add_hist("article", "STRING", "Ordered article")))
    half = common_pb2.Table(name="crashed", columns=list(HIST.columns) + [col("article", "STRING")])
    assert stub.AlterTable(pb.AlterTableRequest(schema_name=unique_schema, table=half)).success  # the state after the crash
    ok(migrate(stub, unique_schema, "crashed", **add_hist("article", "STRING", "Ordered article")))
    assert hrows(server, unique_schema, "crashed", "desc", "article") == hrows(server, unique_schema, "clean", "desc", "article")
    assert columns_of(describe(stub, unique_schema, "crashed")) == columns_of(describe(stub, unique_schema, "clean"))


@ON_BOTH_STORAGES
def test_history_drop_then_add_same_timestamp(stub, server, unique_schema, tmp_path):
    make(stub, server, unique_schema, HIST, HIST_ROWS, tmp_path)
    ok(migrate(stub, unique_schema, "transaction_history", **drop_hist("desc")))
    # key 1 had no desc: dropping changes nothing for it, so it gets no new version
    after_drop = hrows(server, unique_schema, "transaction_history", "desc")
    assert [r for r in after_drop if r[0] == 1] == [(1, d(23), MAX, True, None)]
    assert [r for r in after_drop if r[0] == 2] == [(2, d(23), T_OP - MS, False, "two"), (2, T_OP, MAX, True, None)]
    ok(migrate(stub, unique_schema, "transaction_history", **add_hist("qty", "INT", "7")))
    got = hrows(server, unique_schema, "transaction_history", "desc", "qty")
    active = [r for r in got if r[3]]
    assert sorted(r[0] for r in active) == [1, 2, 3, 4, 10, 20]
    assert all(r[1] == T_OP and r[2] == MAX and r[4] is None and r[5] == 7 for r in active)
    assert len(got) == 13  # one new version per key at the operation timestamp
    assert all(r[5] is None for r in got if not r[3])  # history keeps NULL for the added column


@ON_BOTH_STORAGES
def test_history_column_ops_on_empty_table_and_errors(stub, server, unique_schema, tmp_path):
    make(stub, server, unique_schema, HIST, [], tmp_path)
    ok(migrate(stub, unique_schema, "transaction_history", **add_hist("article", "STRING", "x")))
    ok(migrate(stub, unique_schema, "transaction_history", **drop_hist("desc")))
    ok(migrate(stub, unique_schema, "transaction_history", **drop_hist("not_there")))
    assert rows(server, unique_schema, "transaction_history") == []
    assert "article" in columns_of(describe(stub, unique_schema, "transaction_history"))
    expect_error(lambda: migrate(stub, unique_schema, "transaction_history", **drop_hist("desc", ts="yesterday")),
                 grpc.StatusCode.INVALID_ARGUMENT)
    make(stub, server, unique_schema, LIVE, [], tmp_path)
    expect_error(lambda: migrate(stub, unique_schema, "transaction", **drop_hist("desc")), grpc.StatusCode.INVALID_ARGUMENT)


@ON_BOTH_STORAGES
def test_history_column_ops_refuse_active_versions_after_the_timestamp(stub, server, unique_schema, tmp_path):
    """The migration guide requires max(_fivetran_start) of the active rows <= operation_timestamp:
    an earlier timestamp is refused and the table stays as it was."""
    p = make(stub, server, unique_schema, HIST, HIST_ROWS, tmp_path)
    before, v = hrows(server, unique_schema, "transaction_history", "desc"), delta_version(p)
    early = "2005-05-24T00:00:00Z"  # some active versions start on the 26th
    for op in (add_hist("article", "STRING", "x", ts=early), drop_hist("desc", ts=early)):
        err = expect_error(lambda: migrate(stub, unique_schema, "transaction_history", **op), grpc.StatusCode.INVALID_ARGUMENT)
        assert "start after the operation timestamp" in err.details()
    assert delta_version(p) == v and hrows(server, unique_schema, "transaction_history", "desc") == before
    assert "article" not in columns_of(describe(stub, unique_schema, "transaction_history"))
    ok(migrate(stub, unique_schema, "transaction_history", **drop_hist("desc")))  # OP_TS is after every start


# ---- sync modes ------------------------------------------------------------------------------------
HISTORY_COLS = ["_fivetran_start", "_fivetran_end", "_fivetran_active"]


@ON_BOTH_STORAGES
def test_soft_delete_to_history_and_replay(stub, server, unique_schema, tmp_path):
    p = make(stub, server, unique_schema, LIVE, LIVE_ROWS, tmp_path)
    ok(migrate(stub, unique_schema, "transaction", **sync_mode("SOFT_DELETE_TO_HISTORY")))
    got = rows(server, unique_schema, "transaction")
    assert "_fivetran_deleted" not in got[0]
    assert [(r["id"], r["_fivetran_start"], r["_fivetran_end"], r["_fivetran_active"], r["desc"]) for r in got] == [
        (1, SYNC2, MAX, True, None), (2, SYNC2, MAX, True, "two"), (3, EPOCH, EPOCH, False, "two"),
        (10, SYNC2, MAX, True, "three"), (20, SYNC2, MAX, True, "money")]  # start = MAX(_fivetran_synced)
    cols = columns_of(describe(stub, unique_schema, "transaction"))
    assert list(cols) == ["id", "amount", "desc", "_fivetran_synced"] + HISTORY_COLS
    assert [n for n, c in cols.items() if c[1]] == ["id", "_fivetran_start"]
    v = delta_version(p)
    ok(migrate(stub, unique_schema, "transaction", **sync_mode("SOFT_DELETE_TO_HISTORY")))  # replay
    assert delta_version(p) == v
    # and it is a working history table now
    ok(migrate(stub, unique_schema, "transaction", **add_hist("note", "STRING", "n", ts="2030-01-01T00:00:00Z")))
    assert sum(1 for r in rows(server, unique_schema, "transaction") if r["_fivetran_active"]) == 4


@ON_BOTH_STORAGES
def test_history_to_soft_delete_and_replay(stub, server, unique_schema, tmp_path):
    p = make(stub, server, unique_schema, HIST, HIST_ROWS + [version(5, 1.0, "gone", d(24), d(25), False)], tmp_path)
    ok(migrate(stub, unique_schema, "transaction_history", **sync_mode("HISTORY_TO_SOFT_DELETE")))
    got = rows(server, unique_schema, "transaction_history")
    assert [(r["id"], r["amount"], r["desc"], r["_fivetran_deleted"]) for r in got] == [
        (1, 100.45, None, False), (2, 150.33, "two", False), (3, 150.33, "two", False), (4, 150.33, "two", False),
        (5, 1.0, "gone", True), (10, 100.0, "three", False), (20, 50.0, "money", False)]  # latest version per key
    assert got[-2]["_fivetran_synced"] == d(26, 20, 58)
    cols = columns_of(describe(stub, unique_schema, "transaction_history"))
    assert list(cols) == ["id", "amount", "desc", "_fivetran_synced", "_fivetran_deleted"]
    assert cols["id"][1] and not any(c[1] for n, c in cols.items() if n != "id")
    v = delta_version(p)
    ok(migrate(stub, unique_schema, "transaction_history", **sync_mode("HISTORY_TO_SOFT_DELETE")))  # replay
    assert delta_version(p) == v


@ON_BOTH_STORAGES
def test_sync_mode_conversions_on_empty_tables(stub, server, unique_schema, tmp_path):
    make(stub, server, unique_schema, LIVE, [], tmp_path)
    make(stub, server, unique_schema, HIST, [], tmp_path)
    ok(migrate(stub, unique_schema, "transaction", **sync_mode("SOFT_DELETE_TO_HISTORY")))
    ok(migrate(stub, unique_schema, "transaction_history", **sync_mode("HISTORY_TO_SOFT_DELETE", soft=None)))
    assert rows(server, unique_schema, "transaction") == [] and rows(server, unique_schema, "transaction_history") == []
    assert describe(stub, unique_schema, "transaction").table.columns[-1].name == "_fivetran_active"
    assert describe(stub, unique_schema, "transaction_history").table.columns[-1].name == "_fivetran_deleted"


@ON_BOTH_STORAGES
def test_copy_table_to_history_mode_and_replay(stub, server, unique_schema, tmp_path):
    src = make(stub, server, unique_schema, LIVE, LIVE_ROWS, tmp_path)
    before, v_src = rows(server, unique_schema, "transaction"), delta_version(src)
    op = {"copy": pb.CopyOperation(copy_table_to_history_mode=pb.CopyTableToHistoryMode(
        from_table="transaction", to_table="new_transaction_history", soft_deleted_column="_fivetran_deleted"))}
    ok(migrate(stub, unique_schema, "transaction", **op))
    dst = path(server, unique_schema, "new_transaction_history")
    got = rows(server, unique_schema, "new_transaction_history")
    assert [(r["id"], r["_fivetran_start"], r["_fivetran_end"], r["_fivetran_active"]) for r in got] == [
        (1, SYNC2, MAX, True), (2, SYNC2, MAX, True), (3, EPOCH, EPOCH, False), (10, SYNC2, MAX, True), (20, SYNC2, MAX, True)]
    cols = columns_of(describe(stub, unique_schema, "new_transaction_history"))
    assert list(cols) == ["id", "amount", "desc", "_fivetran_synced"] + HISTORY_COLS
    assert delta_version(dst) == 0
    assert rows(server, unique_schema, "transaction") == before and delta_version(src) == v_src  # source untouched
    ok(migrate(stub, unique_schema, "transaction", **op))  # replay
    assert delta_version(dst) == 0
    # ... and back to soft delete, as the tester does
    ok(migrate(stub, unique_schema, "new_transaction_history", **sync_mode("HISTORY_TO_SOFT_DELETE")))
    back = rows(server, unique_schema, "new_transaction_history")
    assert [(r["id"], r["_fivetran_deleted"]) for r in back] == [(1, False), (2, False), (3, True), (10, False), (20, False)]


@ON_BOTH_STORAGES
def test_live_mode_migrations_are_unsupported(stub, server, unique_schema, tmp_path):
    make(stub, server, unique_schema, LIVE, LIVE_ROWS, tmp_path)
    p = path(server, unique_schema, "transaction")
    v = delta_version(p)
    for kind in ("SOFT_DELETE_TO_LIVE", "HISTORY_TO_LIVE", "LIVE_TO_SOFT_DELETE", "LIVE_TO_HISTORY"):
        r = migrate(stub, unique_schema, "transaction", **sync_mode(kind))
        assert r.WhichOneof("response") == "unsupported", kind
    assert delta_version(p) == v


@ON_BOTH_STORAGES
def test_malformed_migrations(stub, server, unique_schema, tmp_path):
    expect_error(lambda: stub.Migrate(pb.MigrateRequest(details=pb.MigrationDetails(schema=unique_schema, table="t"))),
                 grpc.StatusCode.INVALID_ARGUMENT)
    expect_error(lambda: migrate(stub, unique_schema, "t", add=pb.AddOperation()), grpc.StatusCode.INVALID_ARGUMENT)
    expect_error(lambda: migrate(stub, unique_schema, "../escape", drop=pb.DropOperation(drop_table=True)),
                 grpc.StatusCode.INVALID_ARGUMENT)
    expect_error(lambda: migrate(stub, unique_schema, "t", rename=pb.RenameOperation(rename_table=pb.RenameTable(
        from_table="t", to_table="a/b"))), grpc.StatusCode.INVALID_ARGUMENT)
    log = server.log_text()
    assert "Migrate " in log
