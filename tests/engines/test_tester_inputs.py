"""The destination against Fivetran's public tester input files.

Each input file is run by `python -m testkit.tester` the way Fivetran's destination
tester runs it (encrypted, zstd-compressed CSV batch files with shuffled headers
and random NULL/unmodified markers), into its own schema; the client compares
DescribeTable with the expected schema and the Delta tables read back from disk
with an independent reference model.

Every file runs twice: with history_mode tables in history mode (WriteHistoryBatch)
and with every table as a live table. The schema_migrations_* files run their
schema_migration steps (AlterTable for add_column / change_column_data_type /
drop_column, Migrate for the others), the model applies them too, and the describe
and data comparisons expect the post-migration tables. In the live variant the
history-mode column operations of the sync-modes file have no history table to work
on and are skipped (the client notes it; asserted below). The ddl/dml files have no
history_mode table, so both variants run the same thing there.
"""
from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from testkit.server_process import TESTER_INPUTS
from delta_destination.core.model import Column, DataType as FT

from testkit import tester as tc

INPUT_FILES = tc.input_files(TESTER_INPUTS)


def _run(server, schema, rel, **kw):
    from delta_destination.doors.fivetran.batch_files import Compression

    kw.setdefault("live_only", True)
    kw.setdefault("compression", Compression.ZSTD)
    kw.setdefault("plain_text", False)
    log = []
    result = tc.run_input_file(server.stub, server.warehouse, TESTER_INPUTS / rel, schema, log=log.append,
                               storage_options=server.storage_options, **kw)
    if not result.ok:
        print("\n".join(log))
    return result


def _assert_ok(result, what):
    assert result.ok, f"{what}: {len(result.problems)} problems:\n  - " + "\n  - ".join(result.problems)


def test_inputs_found():
    assert "input.json" in INPUT_FILES
    assert any(p.startswith("operations_on_nonexistent_records/") for p in INPUT_FILES)
    # files without history_mode tables run once (their live variant would be the same run)
    assert tc.has_history_tables(tc.load_input(TESTER_INPUTS / "input.json"))
    assert not tc.has_history_tables(tc.load_input(TESTER_INPUTS / "schema_migrations_input_ddl.json"))
    assert len(VARIANTS) == 2 * len(INPUT_FILES) - 3


def test_a_folder_without_inputs_is_an_error(tmp_path):
    """What a clone missing testdata/ would meet: the parametrized tests fail at collection instead of
    running no case."""
    with pytest.raises(FileNotFoundError):
        tc.input_files(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.json").write_text("{}")
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "notes.md").write_text("")
    assert tc.input_files(tmp_path) == ["a.json", "sub/b.json"]


MIGRATION_FILES = [p for p in INPUT_FILES if p.startswith("schema_migrations_")]


# The live variant only differs where the file has history_mode tables (else it is the same run).
VARIANTS = [pytest.param(rel, live, id=f"{rel}-{'live' if live else 'history'}")
            for rel in INPUT_FILES for live in (False, True)
            if not live or tc.has_history_tables(tc.load_input(TESTER_INPUTS / rel))]


@pytest.mark.parametrize("warehouse_kind", ["local", "s3"], indirect=True, scope="session")
@pytest.mark.parametrize("rel,live_only", VARIANTS)
def test_tester_input(server, unique_schema, rel, live_only, warehouse_kind):
    """Every file; the schema_migrations_* files with their migrations (see below). On a local
    directory and on S3 (there, afterwards: no object outside the tables)."""
    schema = f"{unique_schema}_{hashlib.sha1(rel.encode()).hexdigest()[:8]}"
    migrations = rel in MIGRATION_FILES
    result = _run(server, schema, rel, live_only=live_only, run_migrations=migrations)
    _assert_ok(result, rel)
    assert not any("schema_migration skipped" in n for n in result.notes)
    if migrations:
        _check_migrated(rel, live_only, result)
    if warehouse_kind == "s3":
        assert private_objects(server) == []


def private_objects(server) -> list[str]:
    """Objects of the destination's own under an S3 warehouse (staged batches, probes, trash):
    none may outlive the request that made them. (Object keys: SeaweedFS's filer also lists the
    empty "directories" that deleted objects leave as prefixes, which S3 has not.)"""
    from delta_destination.private_areas import PROBE_PREFIX, STAGING_DIR, TRASH_DIR
    from testkit.tester import warehouse_of

    wh = warehouse_of(server.warehouse, server.storage_options)
    return [e.location for e in wh.storage.list(wh.root, recursive=True)
            if e.location[len(wh.root) + 1:].startswith((STAGING_DIR, TRASH_DIR, PROBE_PREFIX))]


def _check_migrated(rel, live_only, result):
    """What the migration files must leave behind (beyond the model comparison, which already
    covers every table row by row): the tables that exist, and in the live variant of the
    sync-modes file, which history-only ops were skipped."""
    skipped = [n for n in result.notes if "skipped" in n]
    if rel.endswith("_ddl.json"):
        assert set(result.tables) == {"transaction"}
        assert [c[0] for c in result.tables["transaction"]["columns"]].count("desc") == 0
        assert ("amount", "FLOAT", False) in result.tables["transaction"]["columns"]
        assert not skipped
    elif rel.endswith("_dml.json"):
        assert set(result.tables) == {"transaction", "transaction_renamed"}
        assert not skipped
    else:
        assert set(result.tables) == {"transaction", "transaction_history", "new_transaction_history"}
        history = {n for n, t in result.tables.items() if any(c[0] == "_fivetran_start" and c[2] for c in t["columns"])}
        if live_only:
            # transaction_history is a live table in this variant: the two history-mode column
            # operations cannot apply to it and are skipped; everything else runs.
            assert history == {"transaction"}
            assert len(skipped) == 2, skipped
            assert any("add_column_in_history_mode" in n for n in skipped)
            assert any("drop_column_in_history_mode" in n for n in skipped)
        else:
            assert history == {"transaction", "transaction_history"}
            assert not skipped
            # 7 versions; the 6 active ones closed at the operation timestamp - 1 ms, and 6 new
            # versions from it (add + drop at the same timestamp record history once)
            rows = result.tables["transaction_history"]["rows"]
            assert len(rows) == 13
            assert sum(1 for r in rows if r["_fivetran_active"]) == 6


def test_input_gzip(server, unique_schema):
    from delta_destination.doors.fivetran.batch_files import Compression

    _assert_ok(_run(server, unique_schema, "input.json", compression=Compression.GZIP), "input.json gzip")


def test_input_plain_text(server, unique_schema):
    _assert_ok(_run(server, unique_schema, "input.json", plain_text=True), "input.json plain text")


def test_input_uncompressed_plain_text(server, unique_schema):
    from delta_destination.doors.fivetran.batch_files import Compression

    _assert_ok(_run(server, unique_schema, "input.json", plain_text=True, compression=Compression.OFF),
               "input.json plain, uncompressed")


def test_same_input_twice_into_two_schemas(server, unique_schema):
    """Same input, same seed and clock: both schemas end up identical (and correct)."""
    start = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    a = _run(server, unique_schema + "_a", "input.json", start_time=start, seed=7)
    b = _run(server, unique_schema + "_b", "input.json", start_time=start, seed=7)
    _assert_ok(a, "first run")
    _assert_ok(b, "second run")
    assert a.tables.keys() == b.tables.keys()
    for name in a.tables:
        assert a.tables[name] == b.tables[name], name
    assert sum(len(t["rows"]) for t in a.tables.values()) > 0


# ---------------------------------------------------------------------------
# The reference model alone, against literal expectations
# ---------------------------------------------------------------------------

UTC = timezone.utc
T1 = datetime(2024, 5, 1, 10, 0, 0, 1000, tzinfo=UTC)
T2 = T1 + timedelta(seconds=1, milliseconds=1)
T3 = T2 + timedelta(seconds=1, milliseconds=1)


def _live_schema():
    return tc.build_table("t", {"columns": {"id": "INT", "name": "STRING",
                                            "amount": {"type": "DECIMAL", "precision": 6, "scale": 2}},
                                "primary_key": ["id"]}, history=False)


def test_build_table_system_columns():
    s = _live_schema()
    assert [(c.name, c.type, c.primary_key) for c in s.columns] == [
        ("id", FT.INT, True), ("name", FT.STRING, False), ("amount", FT.DECIMAL, False),
        ("_fivetran_deleted", FT.BOOLEAN, False), ("_fivetran_synced", FT.UTC_DATETIME, False)]
    nopk = tc.build_table("c", {"columns": {"x": "STRING"}, "primary_key": []}, history=True)
    assert [(c.name, c.type, c.primary_key) for c in nopk.columns] == [
        ("x", FT.STRING, False), ("_fivetran_id", FT.STRING, True), ("_fivetran_start", FT.UTC_DATETIME, True),
        ("_fivetran_end", FT.UTC_DATETIME, False), ("_fivetran_active", FT.BOOLEAN, False),
        ("_fivetran_synced", FT.UTC_DATETIME, False)]


def test_reference_model_live_scenario():
    s = _live_schema()
    col = {c.name: c for c in s.columns}
    m = tc.ReferenceModel()
    m.create_table(s)
    n = tc.normalize
    m.upsert("t", [
        {"id": 1, "name": "a", "amount": n(col["amount"], Decimal("1.005")), "_fivetran_deleted": False,
         "_fivetran_synced": T1},
        {"id": 2, "name": "b", "amount": n(col["amount"], 2), "_fivetran_deleted": False, "_fivetran_synced": T1},
        {"id": 4, "name": "d", "amount": None, "_fivetran_deleted": False, "_fivetran_synced": T1},
    ])
    m.update("t", [{"id": 1, "name": "a2", "_fivetran_synced": T2},
                   {"id": 9, "name": "ghost", "_fivetran_synced": T2}])  # missing: ignored
    m.soft_delete("t", [{"id": 2}, {"id": 8}], T2)  # id 8 missing: ignored
    m.delete("t", [{"id": 4}, {"id": 7}])  # id 7 missing: ignored
    m.alter_table("t", [Column("id", FT.INT, True), Column("name", FT.STRING),
                        Column("amount", FT.DECIMAL, precision=8, scale=3), Column("note", FT.STRING),
                        Column("_fivetran_deleted", FT.BOOLEAN), Column("_fivetran_synced", FT.UTC_DATETIME)])
    m.upsert("t", [{"id": 3, "name": "c", "amount": Decimal("3.000"), "note": "n",
                    "_fivetran_deleted": False, "_fivetran_synced": T3}])
    m.truncate("t", T2 + timedelta(milliseconds=1), soft_column="_fivetran_deleted")
    m.truncate("t", T1, soft_column=None)  # nothing is older than T1: no-op
    m.truncate("missing", T3)  # missing table: no-op

    expected = [
        {"id": 1, "name": "a2", "amount": Decimal("1.010"), "note": None, "_fivetran_deleted": True,
         "_fivetran_synced": T2},
        {"id": 2, "name": "b", "amount": Decimal("2.000"), "note": None, "_fivetran_deleted": True,
         "_fivetran_synced": T2},
        {"id": 3, "name": "c", "amount": Decimal("3.000"), "note": "n", "_fivetran_deleted": False,
         "_fivetran_synced": T3},
    ]
    got = sorted(m.expected_rows("t"), key=lambda r: r["id"])
    assert got == expected
    assert str(got[0]["amount"]) == "1.010"  # quantised to the new scale, ROUND_HALF_UP from 1.005

    # a hard truncate after everything removes all rows
    m.truncate("t", T3 + timedelta(milliseconds=1))
    assert m.expected_rows("t") == []


def test_reference_model_alter_changes_key_and_types():
    s = tc.build_table("c", {"columns": {"pk1": "INT", "old_pk": "STRING", "v": "INT"},
                             "primary_key": ["pk1", "old_pk"]}, history=False)
    m = tc.ReferenceModel()
    m.create_table(s)
    m.upsert("c", [{"pk1": 1, "old_pk": "x", "v": 5, "_fivetran_deleted": False, "_fivetran_synced": T1}])
    new = tc.build_table("c", {"columns": {"pk1": "INT", "new_pk": "STRING", "v": "STRING"},
                               "primary_key": ["pk1", "new_pk"]}, history=False)
    m.alter_table("c", new.columns)
    t = m.tables["c"]
    assert {c.name: (c.type, c.primary_key) for c in t.schema.columns} == {
        "pk1": (FT.INT, True), "new_pk": (FT.STRING, True), "v": (FT.STRING, False),
        "old_pk": (FT.STRING, False), "_fivetran_deleted": (FT.BOOLEAN, False),
        "_fivetran_synced": (FT.UTC_DATETIME, False)}
    assert m.expected_rows("c") == [{"pk1": 1, "old_pk": "x", "v": "5", "new_pk": None,
                                     "_fivetran_deleted": False, "_fivetran_synced": T1}]


def test_reference_model_history_scenario():
    s = tc.build_table("h", {"columns": {"id": "INT", "v": "STRING"}, "primary_key": ["id"]}, history=True)
    m = tc.ReferenceModel()
    m.create_table(s, history=True)
    s1 = datetime(2005, 5, 23, 20, 57, tzinfo=UTC)
    s2 = datetime(2005, 5, 23, 20, 58, tzinfo=UTC)
    s3 = datetime(2005, 5, 24, 0, 0, tzinfo=UTC)
    s4 = datetime(2005, 5, 25, 0, 0, tzinfo=UTC)
    ms = timedelta(milliseconds=1)
    # one upsert batch with two versions of id 1 and one of id 2
    m.history_earliest_start("h", [{"id": 1, "_fivetran_start": s1}, {"id": 2, "_fivetran_start": s1}])
    m.history_replace("h", [
        {"id": 1, "v": "a", "_fivetran_start": s1, "_fivetran_end": s2 - ms, "_fivetran_active": False,
         "_fivetran_synced": T1},
        {"id": 1, "v": "b", "_fivetran_start": s2, "_fivetran_end": tc.MAX_TS, "_fivetran_active": True,
         "_fivetran_synced": T1},
        {"id": 2, "v": "x", "_fivetran_start": s1, "_fivetran_end": tc.MAX_TS, "_fivetran_active": True,
         "_fivetran_synced": T1},
    ])
    # an update of id 1 at s3 (v unmodified -> taken from the active version) and of a missing id
    m.history_earliest_start("h", [{"id": 1, "_fivetran_start": s3}, {"id": 5, "_fivetran_start": s3}])
    m.history_update("h", [
        {"id": 1, "_fivetran_start": s3, "_fivetran_end": tc.MAX_TS, "_fivetran_active": True, "_fivetran_synced": T2},
        {"id": 5, "v": "ghost", "_fivetran_start": s3, "_fivetran_end": tc.MAX_TS, "_fivetran_active": True,
         "_fivetran_synced": T2},
    ])
    # id 2 deleted at s4
    m.history_delete("h", [{"id": 2, "_fivetran_end": s4 - ms}])
    expected = [
        (1, "a", s1, s2 - ms, False, T1),
        (1, "b", s2, s3 - ms, False, T1),
        (1, "b", s3, tc.MAX_TS, True, T2),
        (2, "x", s1, s4 - ms, False, T1),
    ]
    cols = ["id", "v", "_fivetran_start", "_fivetran_end", "_fivetran_active", "_fivetran_synced"]
    got = sorted(tuple(r[c] for c in cols) for r in m.expected_rows("h"))
    assert got == expected
    # a re-sent batch starting at s2 replaces the versions from s2 on
    m.history_earliest_start("h", [{"id": 1, "_fivetran_start": s2}])
    got = sorted(tuple(r[c] for c in cols) for r in m.expected_rows("h") if r["id"] == 1)
    assert got == [(1, "a", s1, s2 - ms, False, T1)]


def test_normalize_values():
    n = tc.normalize
    assert n(Column("f", FT.FLOAT), Decimal("10.12")) == 10.119999885559082
    assert n(Column("d", FT.DOUBLE), 200) == 200.0
    assert n(Column("u", FT.UTC_DATETIME), "2023-12-31T23:59:59.000Z") == datetime(2023, 12, 31, 23, 59, 59,
                                                                                   tzinfo=UTC)
    assert n(Column("n", FT.NAIVE_DATETIME), "2023-10-27T15:00:00") == datetime(2023, 10, 27, 15)
    assert n(Column("b", FT.BINARY), "[B@7d4991ad") == b"[B@7d4991ad"
    assert n(Column("x", FT.DECIMAL, precision=38, scale=15),
             Decimal("12345678901234567890123.12345")) == Decimal("12345678901234567890123.123450000000000")
    assert n(Column("s", FT.SHORT), -123) == -123
    assert tc.file_value(Column("f", FT.FLOAT), n(Column("f", FT.FLOAT), Decimal("10.12"))) == "10.12"
    assert tc.file_value(Column("u", FT.UTC_DATETIME), T1) == "2024-05-01T10:00:00.001Z"


# ---------------------------------------------------------------------------
# Schema migrations: the requests the client sends, and the model alone
# ---------------------------------------------------------------------------

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
OP_TS = datetime(2005, 5, 28, 20, 57, tzinfo=UTC)


def test_every_migration_of_the_inputs_is_implemented():
    names = {n for rel in MIGRATION_FILES for step in tc.load_input(TESTER_INPUTS / rel)["schema_migration"]
             for n in step}
    assert len(MIGRATION_FILES) == 3
    assert names == {
        "add_column", "change_column_data_type", "drop_column", "copy_column", "update_column_value",
        "add_column_with_default_value", "set_column_to_null", "copy_table", "rename_column", "rename_table",
        "drop_table", "add_column_in_history_mode", "drop_column_in_history_mode", "copy_table_to_history_mode",
        "migrate_soft_delete_to_history", "migrate_history_to_soft_delete"}
    assert names <= set(tc.MIGRATIONS)


class _RecordingStub:
    """Answers every RPC with success (Capabilities: CSV) and records the requests."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, rpc):
        from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb

        def call(request, timeout=None):
            self.calls.append((rpc, request))
            if rpc == "Capabilities":
                return pb.CapabilitiesResponse(batch_file_format=pb.CSV)
            if rpc == "DescribeTable":
                return pb.DescribeTableResponse(not_found=True)
            if rpc == "WriteHistoryBatch":
                return pb.WriteBatchResponse(success=True)
            return getattr(pb, f"{rpc}Response")(success=True)

        return call


def _migration_requests(rel, live_only):
    stub = _RecordingStub()
    tc.run_input_file(stub, "/nonexistent-warehouse", TESTER_INPUTS / rel, "tester", live_only=live_only,
                      run_migrations=True)
    out = []
    seen_migration = False
    for rpc, req in stub.calls:
        if rpc == "AlterTable":
            seen_migration = True
            out.append(("AlterTable", req.table.name, req.drop_columns,
                        tuple((c.name, FT(c.type).name) for c in req.table.columns if not c.name.startswith("_"))))
        elif rpc == "Migrate":
            seen_migration = True
            d = req.details
            which = d.WhichOneof("operation")
            op = getattr(d, which)
            entity = op.WhichOneof("entity") if hasattr(op, "WhichOneof") and which not in (
                "update_column_value", "table_sync_mode_migration") else None
            body = getattr(op, entity) if entity else op
            out.append(("Migrate", d.schema, d.table, which, entity, str(body).replace("\n", " ").strip()))
        elif seen_migration and rpc not in ("DescribeTable",):
            out.append((rpc,))
    return out


def test_ddl_migrations_are_alter_table_calls():
    got = _migration_requests("schema_migrations_input_ddl.json", live_only=False)
    assert got == [
        ("AlterTable", "transaction", False,
         (("id", "INT"), ("amount", "DOUBLE"), ("desc", "STRING"), ("operation_time", "UTC_DATETIME"))),
        ("AlterTable", "transaction", False,
         (("id", "INT"), ("amount", "FLOAT"), ("desc", "STRING"), ("operation_time", "UTC_DATETIME"))),
        ("AlterTable", "transaction", True,
         (("id", "INT"), ("amount", "FLOAT"), ("operation_time", "UTC_DATETIME"))),
    ]


def test_dml_migrations_are_migrate_calls_in_file_order():
    got = _migration_requests("schema_migrations_input_dml.json", live_only=True)
    assert [(g[2], g[3], g[4]) for g in got] == [
        ("transaction", "copy", "copy_column"),
        ("transaction", "update_column_value", None),
        ("transaction", "add", "add_column_with_default_value"),
        ("transaction", "update_column_value", None),
        ("transaction", "copy", "copy_table"),
        ("transaction", "rename", "rename_column"),
        ("transaction_new", "rename", "rename_table"),
        ("transaction_drop", "drop", "drop_table"),
    ]
    assert all(g[1] == "tester" for g in got)
    bodies = [g[5] for g in got]
    assert bodies[0] == 'from_column: "desc" to_column: "desc_detailed"'
    assert bodies[1] == 'column: "amount" value: "202.57"'
    assert bodies[2] == 'column: "operation_time" column_type: UTC_DATETIME default_value: "2005-05-28T20:57:00Z"'
    assert bodies[3] == 'column: "desc" value: "NULL"'
    assert bodies[4] == 'from_table: "transaction" to_table: "transaction_new"'
    assert bodies[5] == 'from_column: "amount" to_column: "amount_renamed"'
    assert bodies[6] == 'from_table: "transaction_new" to_table: "transaction_renamed"'
    assert bodies[7] == "True"


def test_sync_mode_migrations_requests_and_live_only_skips():
    hist = _migration_requests("schema_migrations_input_sync_modes.json", live_only=False)
    assert [(g[2], g[3], g[4], g[5]) for g in hist] == [
        ("transaction_history", "add", "add_column_in_history_mode",
         'column: "article" column_type: STRING default_value: "Ordered article" '
         'operation_timestamp: "2005-05-28T20:57:00Z"'),
        ("transaction_history", "drop", "drop_column_in_history_mode",
         'column: "desc" operation_timestamp: "2005-05-28T20:57:00Z"'),
        ("transaction", "copy", "copy_table_to_history_mode",
         'from_table: "transaction" to_table: "new_transaction_history" soft_deleted_column: "_fivetran_deleted"'),
        ("transaction", "table_sync_mode_migration", None,
         'type: SOFT_DELETE_TO_HISTORY soft_deleted_column: "_fivetran_deleted"'),
        ("new_transaction_history", "table_sync_mode_migration", None,
         'type: HISTORY_TO_SOFT_DELETE soft_deleted_column: "_fivetran_deleted"'),
    ]
    live = _migration_requests("schema_migrations_input_sync_modes.json", live_only=True)
    assert [(g[2], g[3]) for g in live] == [(g[2], g[3]) for g in hist[2:]]


def _model_with(name, spec, rows, history=False):
    m = tc.ReferenceModel()
    s = tc.build_table(name, spec, history=history)
    m.create_table(s, history)
    col = {c.name: c for c in s.columns}
    m.upsert(name, [{k: tc.normalize(col[k], v) for k, v in r.items()} for r in rows])
    return m


TX_SPEC = {"columns": {"id": "INT", "amount": "DOUBLE", "desc": "STRING"}, "primary_key": ["id"]}


def _rows(m, name, *cols):
    return sorted(tuple(r[c] for c in cols) for r in m.expected_rows(name))


def _cols(m, name):
    return {c.name: (FT(c.type).name, c.primary_key) for c in m.tables[name].schema.columns}


def test_reference_model_dml_migrations():
    m = _model_with("transaction", TX_SPEC, [
        {"id": 1, "amount": 100.45, "desc": None, "_fivetran_deleted": False, "_fivetran_synced": T1},
        {"id": 2, "amount": 150.33, "desc": "two", "_fivetran_deleted": False, "_fivetran_synced": T2}])
    m.create_table(tc.build_table("transaction_drop", TX_SPEC, history=False))
    m.copy_column("transaction", "desc", "desc_detailed")
    m.update_column_value("transaction", "amount", "202.57")
    m.add_column_with_default("transaction", Column("operation_time", FT.UTC_DATETIME), "2005-05-28T20:57:00Z")
    m.update_column_value("transaction", "desc", "NULL")
    m.copy_table("transaction", "transaction_new")
    m.rename_column("transaction", "amount", "amount_renamed")
    m.rename_table("transaction_new", "transaction_renamed")
    m.drop_table("transaction_drop")
    m.drop_table("never_existed")  # nothing to drop
    assert set(m.tables) == {"transaction", "transaction_renamed"}
    assert _cols(m, "transaction") == {
        "id": ("INT", True), "amount_renamed": ("DOUBLE", False), "desc": ("STRING", False),
        "_fivetran_deleted": ("BOOLEAN", False), "_fivetran_synced": ("UTC_DATETIME", False),
        "desc_detailed": ("STRING", False), "operation_time": ("UTC_DATETIME", False)}
    renamed = dict(_cols(m, "transaction"))
    renamed["amount"] = renamed.pop("amount_renamed")
    assert _cols(m, "transaction_renamed") == renamed
    assert m.tables["transaction_renamed"].schema.name == "transaction_renamed"
    expected = [(1, 202.57, None, None, OP_TS, T1), (2, 202.57, None, "two", OP_TS, T2)]
    assert _rows(m, "transaction", "id", "amount_renamed", "desc", "desc_detailed", "operation_time",
                 "_fivetran_synced") == expected
    assert _rows(m, "transaction_renamed", "id", "amount", "desc", "desc_detailed", "operation_time",
                 "_fivetran_synced") == expected
    # the copy is independent of its source
    m.update_column_value("transaction", "desc_detailed", "x")
    assert _rows(m, "transaction_renamed", "id", "desc_detailed") == [(1, None), (2, "two")]
    # an existing column still gets the default on every row, in its own type
    m.add_column_with_default("transaction", Column("desc_detailed", FT.INT), "7")
    assert _rows(m, "transaction", "desc_detailed") == [("7",), ("7",)]
    assert tc.migration_value(Column("x", FT.INT), "") is None


def test_reference_model_ddl_migrations():
    m = _model_with("transaction", TX_SPEC, [
        {"id": 1, "amount": 100.45, "desc": None, "_fivetran_deleted": False, "_fivetran_synced": T1}])
    cols = list(m.tables["transaction"].schema.columns)
    m.alter_table("transaction", cols + [Column("operation_time", FT.UTC_DATETIME)])
    cols = [c.with_(type=FT.FLOAT) if c.name == "amount" else c for c in m.tables["transaction"].schema.columns]
    m.alter_table("transaction", cols)
    m.alter_table_drop("transaction", [c for c in cols if c.name != "desc"])
    assert _cols(m, "transaction") == {
        "id": ("INT", True), "amount": ("FLOAT", False), "operation_time": ("UTC_DATETIME", False),
        "_fivetran_deleted": ("BOOLEAN", False), "_fivetran_synced": ("UTC_DATETIME", False)}
    assert m.expected_rows("transaction") == [{"id": 1, "amount": 100.44999694824219, "operation_time": None,
                                               "_fivetran_deleted": False, "_fivetran_synced": T1}]


HIST_SPEC = {"columns": {"id": "INT", "amount": "DOUBLE", "desc": "STRING"}, "primary_key": ["id"]}


def _hist_model():
    m = tc.ReferenceModel()
    m.create_table(tc.build_table("h", HIST_SPEC, history=True), history=True)
    ms = timedelta(milliseconds=1)
    d = lambda day, h=20, mi=57: datetime(2005, 5, day, h, mi, tzinfo=UTC)  # noqa: E731
    v = lambda i, desc, start, end=tc.MAX_TS, active=True: {  # noqa: E731
        "id": i, "amount": 1.0, "desc": desc, "_fivetran_start": start, "_fivetran_end": end,
        "_fivetran_active": active, "_fivetran_synced": T1}
    m.upsert("h", [
        v(1, None, d(23)),                                   # active before the op
        v(10, "a", d(26), d(26, 20, 58) - ms, False),        # history: untouched
        v(10, "b", d(26, 20, 58)),
        v(30, "c", OP_TS),                                   # starts exactly at the op
    ])
    return m, d, ms


def test_reference_model_history_column_migrations():
    m, d, ms = _hist_model()
    m.add_column_in_history_mode("h", Column("article", FT.STRING), "Ordered article", OP_TS)
    m.drop_column_in_history_mode("h", "desc", OP_TS)
    m.drop_column_in_history_mode("h", "no_such_column", OP_TS)  # nothing to do
    assert _cols(m, "h")["article"] == ("STRING", False)
    assert _cols(m, "h")["desc"] == ("STRING", False)  # a dropped column stays in history mode
    cols = ("id", "_fivetran_start", "_fivetran_end", "_fivetran_active", "desc", "article", "_fivetran_synced")
    assert _rows(m, "h", *cols) == [
        (1, d(23), OP_TS - ms, False, None, None, T1),
        (1, OP_TS, tc.MAX_TS, True, None, "Ordered article", T1),
        (10, d(26), d(26, 20, 58) - ms, False, "a", None, T1),
        (10, d(26, 20, 58), OP_TS - ms, False, "b", None, T1),
        (10, OP_TS, tc.MAX_TS, True, None, "Ordered article", T1),
        (30, OP_TS, tc.MAX_TS, True, None, "Ordered article", T1),   # in place, once
    ]
    # an active version starting after the operation timestamp: refused (the guide's validation)
    m.upsert("h", [{"id": 40, "amount": 1.0, "desc": "d", "_fivetran_start": d(29), "_fivetran_end": tc.MAX_TS,
                    "_fivetran_active": True, "_fivetran_synced": T1}])
    with pytest.raises(tc.ModelError, match="start after the operation timestamp"):
        m.add_column_in_history_mode("h", Column("qty", FT.INT), "1", OP_TS)


def test_reference_model_sync_mode_migrations():
    m = _model_with("t", TX_SPEC, [
        {"id": 1, "amount": 1.5, "desc": "x", "_fivetran_deleted": False, "_fivetran_synced": T1},
        {"id": 2, "amount": 2.5, "desc": None, "_fivetran_deleted": True, "_fivetran_synced": T3},
        {"id": 3, "amount": None, "desc": "z", "_fivetran_deleted": None, "_fivetran_synced": T2}])
    m.copy_table_to_history_mode("t", "t_hist", "_fivetran_deleted")
    m.soft_delete_to_history("t", "_fivetran_deleted")
    for name in ("t", "t_hist"):
        assert _cols(m, name) == {
            "id": ("INT", True), "amount": ("DOUBLE", False), "desc": ("STRING", False),
            "_fivetran_synced": ("UTC_DATETIME", False), "_fivetran_start": ("UTC_DATETIME", True),
            "_fivetran_end": ("UTC_DATETIME", False), "_fivetran_active": ("BOOLEAN", False)}
        # start = the table's latest _fivetran_synced (T3, a soft-deleted row's); deleted rows 1970
        assert _rows(m, name, "id", "_fivetran_start", "_fivetran_end", "_fivetran_active", "_fivetran_synced") == [
            (1, T3, tc.MAX_TS, True, T1), (2, EPOCH, EPOCH, False, T3), (3, T3, tc.MAX_TS, True, T2)]
        assert m.tables[name].history
    # back to soft delete: the latest version of each key, deleted = not active
    m.upsert("t", [{"id": 1, "amount": 9.0, "desc": "new", "_fivetran_start": T3 + timedelta(seconds=1),
                    "_fivetran_end": tc.MAX_TS, "_fivetran_active": False, "_fivetran_synced": T3}])
    m.history_to_soft_delete("t", "_fivetran_deleted")
    assert _cols(m, "t") == {"id": ("INT", True), "amount": ("DOUBLE", False), "desc": ("STRING", False),
                             "_fivetran_synced": ("UTC_DATETIME", False), "_fivetran_deleted": ("BOOLEAN", False)}
    assert _rows(m, "t", "id", "amount", "_fivetran_deleted") == [(1, 9.0, True), (2, 2.5, True), (3, None, False)]
    assert not m.tables["t"].history
    m.history_to_soft_delete("t_hist", "_fivetran_deleted", keep_deleted_rows=False)
    assert _rows(m, "t_hist", "id", "_fivetran_deleted") == [(1, False), (3, False)]
