"""Names as customers have them, end to end: mixed case, spaces, dots, dashes, non-ASCII,
reserved words, backticks, 255-character names, on tables, columns and schemas.

The public tester inputs are replayed with every table and column renamed (create, upsert,
update, delete, soft delete, truncate, describe, alter and every schema migration, in
history and live mode), read back from disk with delta-rs at the warehouse's layout.
The engine comes from the `engine` fixture (DELTA_TEST_ENGINES, default sail).

Decisions tested here (docs/names.md): two columns of one table, or two tables of one
schema, whose names differ only in case are refused with INVALID_ARGUMENT (Spark and
Delta resolve names case-insensitively: their data would mix); names unsafe as path
components stay refused; the directory layout is our own spelling (warehouse.py).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import os
from pathlib import Path

import grpc
import pytest

from testkit.fivetran_requests import batch_file, col, columns_of, describe, expect_error, table, write_request
from delta_destination.core.table_dirs import table_location
from delta_destination.names import MAX_COMPONENT, case_clash, name_of_component, path_component, same_ignoring_case
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.warehouse import Warehouse
from testkit import tester as tc
from testkit.delta_read import read_delta_table
from testkit.server_process import TESTER_INPUTS

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)

# ---------------------------------------------------------------------------------------------
# The layout, as pure functions
# ---------------------------------------------------------------------------------------------


def test_path_component_examples():
    assert path_component("orders") == "orders"
    assert path_component("Order_Items-2024.v1") == "Order_Items-2024.v1"
    assert path_component("Order Items") == "Order=20Items"
    assert path_component("Größe") == "Gr=C3=B6=C3=9Fe"
    assert path_component("a=b") == "a=3Db"
    assert path_component(".hidden") == "=2Ehidden"
    assert path_component("a.b") == "a.b"
    assert path_component("T%20") == "T=2520"
    assert path_component("select") == "select"


@pytest.mark.parametrize("name", ["orders", "Order Items", "Größe", "a=b", ".x", "日本語 テーブル", "a%20b", "x" * 255,
                                  "é" * 255, "a" * 200 + "=" * 55, "`quoted`", "tab\u00a0nbsp"])
def test_path_component_is_injective_readable_and_bounded(name):
    c = path_component(name)
    assert len(c.encode("utf-8")) <= MAX_COMPONENT <= 255
    assert not c.startswith(".")
    assert set(c) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.=")
    back = name_of_component(c)
    assert back == name or (back is None and "==" in c)
    # a different name never gets the same directory; a case twin is recognised as one
    assert path_component(name + "x") != c
    if name.swapcase() != name:
        assert path_component(name.swapcase()) != c
    assert same_ignoring_case(c, name.upper()) and same_ignoring_case(c, name.lower())
    assert not same_ignoring_case(c, name + "x")


def test_long_names_keep_a_readable_prefix():
    long = "Customer Lifetime Value " * 20
    c = path_component(long)
    assert c.startswith("Customer=20Lifetime=20Value=20")
    assert "==" in c and len(c) <= 255
    assert path_component(long[:-1] + "X") != c
    assert same_ignoring_case(c, long.upper())


def test_case_clash():
    assert case_clash(["id", "Name", "x"]) is None
    assert case_clash(["id", "Name", "NAME"]) == ("Name", "NAME")
    assert case_clash(["id", "id"]) == ("id", "id")
    assert case_clash(["straße", "STRASSE"]) == ("straße", "STRASSE")  # casefold, like Unicode-aware readers


def test_legacy_locations_are_still_found(tmp_path):
    """A table created before names were spelled (raw directory) keeps being used."""
    wh = Warehouse(str(tmp_path))
    legacy = tmp_path / "s" / "price$list"
    (legacy / "_delta_log").mkdir(parents=True)
    (legacy / "_delta_log" / ("0" * 20 + ".json")).write_text("{}")
    assert table_location(wh, "s", "price$list") == str(legacy)
    assert table_location(wh, "s", "price list") == str(tmp_path / "s" / "price=20list")
    assert wh.legacy_location("s", "a=b") is None  # its raw spelling could be another table's new one
    assert wh.legacy_location("s", "plain") is None  # same spelling either way


# ---------------------------------------------------------------------------------------------
# The tester inputs with every name made hostile
# ---------------------------------------------------------------------------------------------

RESERVED = ["select", "from", "where", "group", "order", "table", "limit", "join", "by", "and"]
TABLE_STYLES = [
    lambda n, k: n.replace("_", " ").title(),                       # "Transaction History"
    lambda n, k: f"{n}.v1-ß",                                       # dots, dashes, non-ASCII
    lambda n, k: f"Ünïcødé 表 {n}",
    lambda n, k: (f"{n} " + "Ω" * 255)[:255],                       # 255 characters, hashed directory
    lambda n, k: (f"{n}-" + "x" * 255)[:255],                       # 255 ASCII characters
    lambda n, k: f"Order {n} (copy) #1 = 100%",
]
COLUMN_STYLES = [
    lambda n, k: n.upper(),
    lambda n, k: f"{n}.part",
    lambda n, k: f"{n} with space",
    lambda n, k: f"{n}-dash",
    lambda n, k: f"{n}_ñ日本",
    lambda n, k: RESERVED[k % len(RESERVED)] + ("" if k < len(RESERVED) else str(k)),
    lambda n, k: (f"{n} " + "é" * 255)[:255],
    lambda n, k: f"{n.title()}Mixed`tick`",
]
TABLE_FIELDS = ("table", "from_table", "to_table")
COLUMN_FIELDS = ("column", "from_column", "to_column")


def _is_system(name: str) -> bool:
    return name.startswith("_fivetran") or name == tc.OP_TIME


def _names(spec):
    tables, columns = set(), set()
    for key in ("create_table", "alter_table"):
        for t, body in spec.get(key, {}).items():
            tables.add(t)
            columns.update(body["columns"])
    for step in spec.get("schema_migration", []):
        for ops in step.values():
            for op in ops:
                tables.update(op[f] for f in TABLE_FIELDS if f in op)
                columns.update(op[f] for f in COLUMN_FIELDS if f in op)
    return sorted(tables), sorted(c for c in columns if not _is_system(c))


def hostile(spec: dict, shift: int = 0) -> tuple[dict, dict, dict]:
    """The spec with every table and column renamed (table styles rotated by `shift`, so that
    every style meets some file); returns (spec, table map, column map)."""
    tables, columns = _names(spec)
    tmap = {t: TABLE_STYLES[(i + shift) % len(TABLE_STYLES)](t, i) for i, t in enumerate(tables)}
    cmap = {c: COLUMN_STYLES[i % len(COLUMN_STYLES)](c, i // len(COLUMN_STYLES)) for i, c in enumerate(columns)}
    assert case_clash(tmap.values()) is None and case_clash(cmap.values()) is None
    T = lambda t: tmap[t]  # noqa: E731
    C = lambda c: c if _is_system(c) else cmap[c]  # noqa: E731
    out = {}
    for key in ("create_table", "alter_table"):
        if key in spec:
            out[key] = {T(t): {**body, "columns": {C(c): typ for c, typ in body["columns"].items()},
                               "primary_key": [C(c) for c in body.get("primary_key", [])]}
                        for t, body in spec[key].items()}
    if "describe_table" in spec:
        out["describe_table"] = [T(t) for t in spec["describe_table"]]
    out["ops"] = []
    for step in spec.get("ops", []):
        new = {}
        for op, body in step.items():
            if isinstance(body, list):
                new[op] = [T(t) for t in body]
            else:
                new[op] = {T(t): [{C(c): v for c, v in row.items()} for row in rows] for t, rows in body.items()}
        out["ops"].append(new)
    if "schema_migration" in spec:
        out["schema_migration"] = [
            {name: [{k: T(v) if k in TABLE_FIELDS else C(v) if k in COLUMN_FIELDS else v for k, v in op.items()}
                    for op in ops] for name, ops in step.items()} for step in spec["schema_migration"]]
    for k in spec:
        out.setdefault(k, spec[k])
    return out, tmap, cmap


NAME_INPUTS = ["input.json", "schema_migrations_input_ddl.json", "schema_migrations_input_dml.json",
               "schema_migrations_input_sync_modes.json", "operations_on_nonexistent_records/truncate_then_soft_delete.json"]


def test_hostile_renaming_covers_every_name():
    spec, tmap, cmap = hostile(tc.load_input(TESTER_INPUTS / "schema_migrations_input_dml.json"))
    text = repr(spec)
    for original in list(tmap) + list(cmap):
        assert repr(original) not in text.replace(repr(tmap.get(original)), "").replace(repr(cmap.get(original)), ""), original


# The live variant only differs where the file has history_mode tables (else it is the same run).
NAME_VARIANTS = [pytest.param(rel, live, id=f"{rel}-{'live' if live else 'history'}")
                 for rel in NAME_INPUTS for live in (False, True)
                 if not live or tc.has_history_tables(tc.load_input(TESTER_INPUTS / rel))]


@pytest.mark.parametrize("rel,live_only", NAME_VARIANTS)
def test_tester_input_with_hostile_names(engine_server, rel, live_only):
    spec, tmap, _ = hostile(tc.load_input(TESTER_INPUTS / rel), shift=3 * NAME_INPUTS.index(rel))
    schema = f"Schema Ü.{'live' if live_only else 'hist'}-{hashlib.sha1(rel.encode()).hexdigest()[:6]}"
    log = []
    result = tc.run_spec(engine_server.stub, engine_server.warehouse, spec, schema, live_only=live_only,
                         run_migrations=rel.startswith("schema_migrations_"), log=log.append)
    if not result.ok:
        print("\n".join(log))
    assert result.ok, "\n".join(result.problems)
    if not live_only:
        assert not any("skipped" in n for n in result.notes), result.notes
    assert result.tables, "nothing was compared"
    assert set(result.tables) <= set(tmap.values())
    # every table that is left is found at its spelled directory
    wh = Warehouse(str(engine_server.warehouse))
    for name in result.tables:
        assert os.path.isdir(os.path.join(table_location(wh, schema, name), "_delta_log")), name


# ---------------------------------------------------------------------------------------------
# Case twins, unsafe names, restarts
# ---------------------------------------------------------------------------------------------

def _cols(*names, key="id"):
    return [col(key, "INT", pk=True), *[col(n, "STRING") for n in names], col("_fivetran_synced", "UTC_DATETIME"),
            col("_fivetran_deleted", "BOOLEAN")]


def _write(stub, tmp_path, schema, t, rows, kind="replace", columns=None):
    f = batch_file(tmp_path, t, rows, kind=kind, columns=columns)
    return stub.WriteBatch(write_request(schema, t, **{kind: [f]}))


def test_columns_differing_only_in_case_are_refused(engine_server, tmp_path):
    stub, schema = engine_server.stub, "case_cols"
    err = expect_error(lambda: stub.CreateTable(pb.CreateTableRequest(
        schema_name=schema, table=table("t", *_cols("name", "NAME")))), grpc.StatusCode.INVALID_ARGUMENT)
    assert "'name' and 'NAME' differ only in case" in err.details()
    assert describe(stub, schema, "t").not_found
    t = table("t", *_cols("name"))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=t)).success
    _write(stub, tmp_path, schema, t, [{"id": 1, "name": "a", "_fivetran_synced": T0, "_fivetran_deleted": False}])
    # AlterTable adding "Name" while "name" is kept (drop_columns=false) would put both in one table
    altered = table("t", *_cols("Name"))
    err = expect_error(lambda: stub.AlterTable(pb.AlterTableRequest(schema_name=schema, table=altered)),
                       grpc.StatusCode.INVALID_ARGUMENT)
    assert "differ only in case" in err.details()
    assert list(columns_of(describe(stub, schema, "t"))) == ["id", "name", "_fivetran_synced", "_fivetran_deleted"]
    # with drop_columns=true it is a real replacement of the column: allowed
    assert stub.AlterTable(pb.AlterTableRequest(schema_name=schema, table=altered, drop_columns=True)).success
    assert list(columns_of(describe(stub, schema, "t"))) == ["id", "_fivetran_synced", "_fivetran_deleted", "Name"]


def test_tables_differing_only_in_case_are_refused(engine_server, tmp_path):
    stub, schema = engine_server.stub, "Case Tables"
    users = table("Users", *_cols("v"))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=users)).success
    _write(stub, tmp_path, schema, users, [{"id": 1, "v": "kept", "_fivetran_synced": T0, "_fivetran_deleted": False}])
    for twin in ("users", "USERS"):
        err = expect_error(lambda: stub.CreateTable(pb.CreateTableRequest(
            schema_name=schema, table=table(twin, *_cols("v")))), grpc.StatusCode.INVALID_ARGUMENT)
        assert "differs from" in err.details() and "only in case" in err.details()
        assert describe(stub, schema, twin).not_found
    other = table("other", *_cols("v"))
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=other)).success
    for op in (pb.RenameTable(from_table="other", to_table="USERS"), pb.CopyTable(from_table="other", to_table="uSeRs")):
        field = "rename" if isinstance(op, pb.RenameTable) else "copy"
        details = pb.MigrationDetails(schema=schema, table="other", **{field: {
            ("rename_table" if field == "rename" else "copy_table"): op}})
        expect_error(lambda: stub.Migrate(pb.MigrateRequest(details=details)), grpc.StatusCode.INVALID_ARGUMENT)
    # renaming a table to another case of its own name is allowed
    details = pb.MigrationDetails(schema=schema, table="Users",
                                  rename=pb.RenameOperation(rename_table=pb.RenameTable(from_table="Users", to_table="USERS")))
    assert stub.Migrate(pb.MigrateRequest(details=details)).success
    wh = Warehouse(str(engine_server.warehouse))
    rows = read_delta_table(table_location(wh, schema, "USERS")).to_pylist()
    assert [(r["id"], r["v"]) for r in rows] == [(1, "kept")]
    assert describe(stub, schema, "Users").not_found


@pytest.mark.parametrize("name", ["a/b", "..", ".", "a\\b", "nul\x00", "line\nbreak", ""])
def test_names_unsafe_as_paths_stay_refused(engine_server, name):
    stub = engine_server.stub
    for schema, tname in (("unsafe", name), (name, "t")):
        if not tname:
            continue  # an empty table name is a malformed request, tested elsewhere
        expect_error(lambda: stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=table(tname, *_cols("v")))),
                     grpc.StatusCode.INVALID_ARGUMENT)
    assert not any(".." in p.name for p in Path(engine_server.warehouse).rglob("*"))


def test_hostile_names_survive_a_restart(engine, tmp_path, dedicated_server):
    """The layout is the destination's own: a new process (and a new engine session) finds
    the table again, describes the exact names and keeps writing into the same table."""
    wh = tmp_path / "warehouse"
    schema, name = "Sales Ü.2024", "Order Items (EU) é" + "x" * 200
    cols = ["Customer Name", "a.b", "select", "ÄÖÜ", "x" * 255]
    t = table(name, *_cols(*cols, key="ID-key"))
    row = lambda i, v: {"ID-key": i, **{c: f"{v}{j}" for j, c in enumerate(cols)},  # noqa: E731
                        "_fivetran_synced": T0, "_fivetran_deleted": False}
    srv = dedicated_server(wh, tmp_path / "one.log", engine=engine)
    try:
        assert srv.stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=t)).success
        _write(srv.stub, tmp_path, schema, t, [row(1, "a"), row(2, "b")])
    finally:
        srv.stop()
    srv = dedicated_server(wh, tmp_path / "two.log", engine=engine)
    try:
        d = describe(srv.stub, schema, name)
        assert d.table.name == name
        assert [c.name for c in d.table.columns] == ["ID-key", *cols, "_fivetran_synced", "_fivetran_deleted"]
        assert srv.stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=t)).success  # replay: same table
        _write(srv.stub, tmp_path, schema, t, [row(2, "c"), row(3, "d")])
        _write(srv.stub, tmp_path, schema, t, [{"ID-key": 1, "select": "upd", "_fivetran_synced": T0}], kind="update",
               columns=["ID-key", "select", "_fivetran_synced"])
        _write(srv.stub, tmp_path, schema, t, [{"ID-key": 3, "_fivetran_synced": T0}], kind="delete",
               columns=["ID-key", "_fivetran_synced"])
    finally:
        srv.stop()
    location = table_location(Warehouse(str(wh)), schema, name)
    assert Path(location).parent.name == "Sales=20=C3=9C.2024"
    rows = {r["ID-key"]: r for r in read_delta_table(location).to_pylist()}
    assert sorted(rows) == [1, 2]
    assert rows[1]["select"] == "upd" and rows[1]["Customer Name"] == "a0"
    assert rows[2]["Customer Name"] == "c0" and rows[2]["x" * 255] == "c4"
    assert sorted(os.listdir(wh / "Sales=20=C3=9C.2024")) == [Path(location).name]


def test_parquet_batches_with_hostile_names(engine, tmp_path, dedicated_server):
    """Parquet batch files carry the column names inside the file: the same inputs pass."""
    from delta_destination.doors.fivetran.batch_files import Compression, FileFormat

    srv = dedicated_server(tmp_path / "warehouse", tmp_path / "server.log", ["--batch-file-format", "parquet"], engine=engine)
    try:
        for i, rel in enumerate(["input.json", "schema_migrations_input_sync_modes.json"]):
            spec, _, _ = hostile(tc.load_input(TESTER_INPUTS / rel), shift=3 * i + 1)
            result = tc.run_spec(srv.stub, srv.warehouse, spec, f"Parquet Ü {i}", live_only=False,
                                 run_migrations=rel.startswith("schema_migrations_"), file_format=FileFormat.PARQUET,
                                 compression=Compression.OFF)
            assert result.ok, "\n".join(result.problems)
    finally:
        srv.stop()
