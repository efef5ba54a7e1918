"""Pure parts of the Airbyte door, exactly: type mapping, catalog planning, value conversion,
one-row-per-key selection, state bookkeeping, and the core's delete_outside SQL."""
from __future__ import annotations

import json
from datetime import date, datetime, timezone

import pytest

from delta_destination.doors.airbyte.stream_plans import Mode, plan_catalog, plan_stream
from delta_destination.doors.airbyte.errors import CatalogInvalid, RecordRejected
from delta_destination.doors.airbyte.records import Record, check_identity, fit_size, latest_per_key, to_arrow
from delta_destination.doors.airbyte.states import StateLedger
from delta_destination.doors.airbyte.types import column_type
from delta_destination.core.model import DataType as T
from delta_destination.core.sql import delete_outside_sql


@pytest.mark.parametrize("schema, expected", [
    ({"type": "string"}, T.STRING),
    ({"type": ["null", "string"]}, T.STRING),
    ({"type": "string", "format": "date"}, T.NAIVE_DATE),
    ({"type": "string", "format": "date-time"}, T.UTC_DATETIME),
    ({"type": "string", "format": "date-time", "airbyte_type": "timestamp_with_timezone"}, T.UTC_DATETIME),
    ({"type": "string", "format": "date-time", "airbyte_type": "timestamp_without_timezone"}, T.NAIVE_DATETIME),
    ({"type": "string", "format": "time", "airbyte_type": "time_with_timezone"}, T.NAIVE_TIME),
    ({"type": "integer"}, T.LONG),
    ({"type": "number", "airbyte_type": "integer"}, T.LONG),
    ({"type": "number"}, T.DOUBLE),
    ({"type": "boolean"}, T.BOOLEAN),
    ({"type": "object", "properties": {"a": {"type": "string"}}}, T.JSON),
    ({"type": "array", "items": {"type": "integer"}}, T.JSON),
    ({"type": ["string", "integer"]}, T.JSON),
    ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, T.JSON),
    ({"oneOf": [{"type": "number"}, {"type": "null"}]}, T.DOUBLE),
    ({"anyOf": [{"type": "null"}, {"type": "string", "format": "date"}]}, T.NAIVE_DATE),
    ({"allOf": [{"type": "string"}]}, T.JSON),
    ({}, T.JSON),
    ("not a schema", T.JSON),
])
def test_json_schema_to_core_type(schema, expected):
    assert column_type(schema) == expected


def _configured(props, mode="append_dedup", pk=("id",), cursor="cur", **extra):
    return {"stream": {"name": "s", "json_schema": {"properties": props}}, "destination_sync_mode": mode,
            "primary_key": [[k] for k in pk], "cursor_field": [cursor] if cursor else None, **extra}


PROPS = {"id": {"type": "integer"}, "cur": {"type": "integer"}, "v": {"type": "string"}}


def test_plan_has_system_columns_first_and_keys_only_for_dedup():
    p = plan_stream(_configured(PROPS, generation_id=5, minimum_generation_id=5, sync_id=2), "dflt")
    assert p.schema == "dflt" and p.mode == Mode.APPEND_DEDUP and p.primary_key == ("id",) and p.cursor == "cur"
    assert p.table.column_names == ["_airbyte_raw_id", "_airbyte_extracted_at", "_airbyte_meta",
                                    "_airbyte_generation_id", "id", "cur", "v"]
    assert p.table.primary_keys == ["id"]
    assert p.newer_by == ("_airbyte_generation_id", "cur", "_airbyte_extracted_at")
    assert (p.generation_id, p.minimum_generation_id, p.sync_id) == (5, 5, 2)
    a = plan_stream(_configured(PROPS, mode="append"), "dflt")
    assert a.table.primary_keys == [] and a.cursor is None and a.generation_id is None


def test_two_streams_on_one_table_are_refused():
    cat = {"streams": [_configured(PROPS), _configured(PROPS)]}
    with pytest.raises(CatalogInvalid, match="configured twice"):
        plan_catalog(cat, "dflt")


def test_values_convert_or_are_nulled_with_a_change():
    props = {"id": {"type": "integer"}, "cur": {"type": "integer"}, "n": {"type": "number"},
             "ts": {"type": "string", "format": "date-time"},
             "ntz": {"type": "string", "format": "date-time", "airbyte_type": "timestamp_without_timezone"},
             "d": {"type": "string", "format": "date"}, "b": {"type": "boolean"}, "o": {"type": "object"},
             "s": {"type": "string"}}
    p = plan_stream(_configured(props, sync_id=3, generation_id=1), "x")
    recs = [Record({"id": "7", "cur": 2.0, "n": "1.5", "ts": "2024-01-01T01:00:00+01:00", "ntz": "2024-01-01T01:00:00+01:00",
                    "d": "2024-02-29", "b": False, "o": {"k": [1, "ü"]}, "s": 12}, 1_700_000_000_000),
            Record({"id": 8, "n": "NaN", "ts": "3 BC", "d": "2024-02-30", "b": "true", "extra": 1}, 1_700_000_000,
                   changes=[{"field": "s", "change": "TRUNCATED", "reason": "SOURCE_FIELD_SIZE_LIMITATION"}])]
    rows = to_arrow(p, recs).to_pylist()
    assert rows[0]["id"] == 7 and rows[0]["cur"] == 2 and rows[0]["n"] == 1.5 and rows[0]["s"] == "12"
    assert rows[0]["ts"] == datetime(2024, 1, 1, 0, 0, tzinfo=timezone.utc)
    assert rows[0]["ntz"] == datetime(2024, 1, 1, 1, 0)  # the wall-clock time as written
    assert rows[0]["d"] == date(2024, 2, 29) and rows[0]["b"] is False and rows[0]["o"] == '{"k":[1,"ü"]}'
    assert json.loads(rows[0]["_airbyte_meta"]) == {"sync_id": 3, "changes": []}
    assert rows[1]["_airbyte_extracted_at"] == datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc)  # seconds
    assert [rows[1][c] for c in ("n", "ts", "d", "b")] == [None] * 4
    changes = json.loads(rows[1]["_airbyte_meta"])["changes"]
    assert changes[0]["reason"] == "SOURCE_FIELD_SIZE_LIMITATION"
    assert [(c["field"], c["change"], c["reason"]) for c in changes[1:]] == [
        (f, "NULLED", "DESTINATION_TYPECAST_ERROR") for f in ("n", "ts", "d", "b")]


def test_keys_and_cursors_are_never_nulled():
    p = plan_stream(_configured(PROPS), "x")
    check_identity(p, Record({"id": 1, "cur": None}, 0), "line 1")  # a NULL cursor is fine (oldest)
    with pytest.raises(RecordRejected, match="primary key field 'id'"):
        check_identity(p, Record({"cur": 1}, 0), "line 1")
    with pytest.raises(RecordRejected, match="'cur' does not fit its type LONG"):
        check_identity(p, Record({"id": 1, "cur": "soon"}, 0), "line 1")


def test_fit_size_nulls_the_largest_fields_first():
    p = plan_stream(_configured({**PROPS, "big": {"type": "string"}, "mid": {"type": "string"}}), "x")
    rec = Record({"id": 1, "cur": 1, "big": "x" * 5000, "mid": "y" * 3000, "v": "z"}, 0, size=8100)
    fit_size(p, rec, 4000, "line 1")
    assert rec.data["big"] is None and rec.data["mid"] == "y" * 3000 and rec.size <= 4000
    assert rec.changes == [{"field": "big", "change": "NULLED", "reason": "DESTINATION_RECORD_SIZE_LIMITATION"}]


def test_latest_per_key_orders_by_generation_cursor_then_extraction_then_arrival():
    p = plan_stream(_configured(PROPS, generation_id=1), "x")
    recs = [Record({"id": 1, "cur": 5, "v": "a"}, 1000_000_000_000),
            Record({"id": 1, "cur": 4, "v": "lower cursor"}, 1000_000_000_009),
            Record({"id": 2, "cur": None, "v": "null"}, 1000_000_000_000),
            Record({"id": 2, "cur": 0, "v": "zero beats null"}, 1000_000_000_000),
            Record({"id": 3, "cur": 1, "v": "early"}, 1000_000_000_001),
            Record({"id": 3, "cur": 1, "v": "tie: later extraction"}, 1000_000_000_002),
            Record({"id": 4, "cur": 1, "v": "first"}, 1000_000_000_000),
            Record({"id": 4, "cur": 1, "v": "full tie: later record"}, 1000_000_000_000)]
    got = latest_per_key(p, to_arrow(p, recs)).to_pylist()
    assert sorted((r["id"], r["v"]) for r in got) == [
        (1, "a"), (2, "zero beats null"), (3, "tie: later extraction"), (4, "full tie: later record")]


def test_ledger_counts_per_stream_and_global_and_keeps_every_field():
    led = StateLedger()
    a, b = (None, "a"), ("ns", "b")
    for k in (a, a, b):
        led.record(k)
    s1 = {"type": "STATE", "state": {"type": "STREAM", "stream": {"x": 1}, "id": 9, "destinationStats": {"other": 1}}}
    led.received(s1, a)
    led.received({"type": "STATE", "state": {"type": "STREAM"}}, a)
    led.received({"type": "STATE", "state": {"type": "GLOBAL", "global": {}}}, None)
    led.record(b)
    led.received({"type": "STATE", "state": {"type": "STREAM"}}, b)
    out = led.take()
    assert [m["state"]["destinationStats"]["recordCount"] for m in out] == [2.0, 0.0, 3.0, 2.0]
    assert out[0]["state"] == {"type": "STREAM", "stream": {"x": 1}, "id": 9,
                               "destinationStats": {"other": 1, "recordCount": 2.0}}
    assert s1["state"]["destinationStats"] == {"other": 1}  # the received message is not altered
    assert led.take() == []


def test_delete_outside_sql():
    assert delete_outside_sql("t1", "g", below=3) == "DELETE FROM t1 WHERE `g` IS NULL OR `g` < 3"
    assert delete_outside_sql("t1", "a`b", at_or_above="4") == "DELETE FROM t1 WHERE `a``b` IS NULL OR `a``b` >= 4"
    assert delete_outside_sql("t1", "g", 1, 9) == "DELETE FROM t1 WHERE `g` IS NULL OR `g` < 1 OR `g` >= 9"
