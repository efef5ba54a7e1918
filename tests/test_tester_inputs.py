"""The destination against Fivetran's public tester input files.

Each input file is run by scripts/tester_client.py the way Fivetran's destination
tester runs it (encrypted, zstd-compressed CSV batch files with shuffled headers
and random NULL/unmodified markers), into its own schema; the client compares
DescribeTable with the expected schema and the Delta tables read back from disk
with an independent reference model.

Every file runs twice: with history_mode tables in history mode (WriteHistoryBatch)
and with every table as a live table. The schema_migration steps are skipped here
(see test_migrations_* for Migrate), so the describe comparison expects the
pre-migration schema.
"""
from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from conftest import TESTER_INPUTS
from server.model import Column, FivetranType as FT, TableSchema

import tester_client as tc

INPUT_FILES = sorted(p.relative_to(TESTER_INPUTS).as_posix() for p in TESTER_INPUTS.rglob("*.json"))


def _run(server, schema, rel, **kw):
    from server.batch_reader import Compression

    kw.setdefault("live_only", True)
    kw.setdefault("compression", Compression.ZSTD)
    kw.setdefault("plain_text", False)
    log = []
    result = tc.run_input_file(server.stub, server.warehouse, TESTER_INPUTS / rel, schema, log=log.append, **kw)
    if not result.ok:
        print("\n".join(log))
    return result


def _assert_ok(result, what):
    assert result.ok, f"{what}: {len(result.problems)} problems:\n  - " + "\n  - ".join(result.problems)


def test_inputs_found():
    assert "input.json" in INPUT_FILES
    assert any(p.startswith("operations_on_nonexistent_records/") for p in INPUT_FILES)


@pytest.mark.parametrize("live_only", [False, True], ids=["history", "live"])
@pytest.mark.parametrize("rel", INPUT_FILES)
def test_tester_input(server, unique_schema, rel, live_only):
    schema = f"{unique_schema}_{hashlib.sha1(rel.encode()).hexdigest()[:8]}"
    result = _run(server, schema, rel, live_only=live_only)
    _assert_ok(result, rel)
    if rel.startswith("schema_migrations_"):
        assert any("schema_migration skipped" in n for n in result.notes)


def test_input_gzip(server, unique_schema):
    from server.batch_reader import Compression

    _assert_ok(_run(server, unique_schema, "input.json", compression=Compression.GZIP), "input.json gzip")


def test_input_plain_text(server, unique_schema):
    _assert_ok(_run(server, unique_schema, "input.json", plain_text=True), "input.json plain text")


def test_input_uncompressed_plain_text(server, unique_schema):
    from server.batch_reader import Compression

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
