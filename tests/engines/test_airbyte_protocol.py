"""The Airbyte door over real pipes: the real command, real Delta tables read back with delta-rs.

Each `write` is a fresh process (as the platform runs it), so these tests also cover
start-up and shutdown of the embedded engine."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from testkit.airbyte_cli import (ON_BOTH_ENGINES, Running, engine, record, run, stream, stream_state,  # noqa: F401
                                  stream_status, write_json)
from testkit.delta_read import delta_version, read_delta_table, sorted_rows
from testkit.processes import running, spark_jvms_below

USERS = {"id": {"type": "integer"}, "name": {"type": ["null", "string"]},
         "updated_at": {"type": "string", "format": "date-time"}, "score": {"type": "number"},
         "born": {"type": "string", "format": "date"}, "address": {"type": "object"}, "tags": {"type": "array"},
         "local": {"type": "string", "format": "date-time", "airbyte_type": "timestamp_without_timezone"},
         "alarm": {"type": "string", "format": "time"}, "active": {"type": "boolean"},
         "either": {"type": ["string", "integer"]}}


@pytest.fixture
def wh(tmp_path) -> Path:
    return tmp_path / "warehouse"


@pytest.fixture
def config(tmp_path, wh, engine, door_process) -> str:
    return write_json(tmp_path / "config.json", {"warehouse": str(wh), "engine": engine, **door_process(engine)})


def catalog(tmp_path, *streams) -> str:
    return write_json(tmp_path / "catalog.json", {"streams": list(streams)})


def data_of(rows, *cols):
    return [tuple(r[c] for c in cols) for r in rows]


def test_spec_answers_one_spec_message():
    r = run(["spec"])
    assert r.rc == 0
    (msg,) = r.messages
    spec = msg["spec"]
    assert spec["supported_destination_sync_modes"] == ["append", "overwrite", "append_dedup"]
    assert spec["connectionSpecification"]["required"] == ["warehouse"]
    assert set(spec["connectionSpecification"]["properties"]) >= {"warehouse", "engine", "spark_remote"}


def test_check_writes_reads_and_removes_a_probe(tmp_path, wh, config):
    r = run(["check", "--config", config])
    assert r.rc == 0
    (status,) = [m["connectionStatus"] for m in r.of("CONNECTION_STATUS")]
    assert status["status"] == "SUCCEEDED"
    assert [p.name for p in wh.iterdir() if "probe" in p.name] == []


@pytest.mark.parametrize("bad, words", [
    ({}, "warehouse"),
    ({"warehouse": "/dev/null/below-a-file"}, "warehouse"),
    ({"warehouse": "x", "engine": "duckdb"}, "engine must be one of"),
    ({"warehouse": "x", "spark_remote": "http://nope"}, "sc://"),
])
def test_check_with_a_bad_config_is_failed_not_an_error(tmp_path, bad, words):
    r = run(["check", "--config", write_json(tmp_path / "bad.json", bad)])
    assert r.rc == 0
    (status,) = [m["connectionStatus"] for m in r.of("CONNECTION_STATUS")]
    assert status["status"] == "FAILED" and words in status["message"]


def test_append_types_system_columns_and_state_echo(tmp_path, wh, config):
    cat = catalog(tmp_path, stream("users", USERS, "append", generation=4, minimum=0, sync_id=9))
    lines = [
        record("users", {"id": 1, "name": "ä €𝄞", "updated_at": "2024-05-01T12:00:00+02:00", "score": 1.25,
                         "born": "1990-02-03", "address": {"city": "Köln", "n": [1, 2]}, "tags": ["a", 1],
                         "local": "2024-05-01T12:00:00", "alarm": "07:30:00", "active": True, "either": 5,
                         "not_in_catalog": "ignored"}, emitted_at=1_700_000_000_123),
        stream_state("users", {"cursor": 1}, id=77, sourceStats={"recordCount": 1.0}, unknownField={"x": [1]}),
        record("users", {"id": 2, "score": "not a number", "born": "yesterday", "active": "yes"}),
        record("users", {"id": 3}),
        stream_state("users", {"cursor": 3}, id=78),
    ]
    r = run(["write", "--config", config, "--catalog", cat], lines)
    assert r.rc == 0, r.stderr[-2000:]
    # States echoed unchanged, in order, with the records each covers.
    sent = [json.loads(line)["state"] for line in lines if '"STATE"' in line]
    assert r.states == [{**s, "destinationStats": {"recordCount": n}} for s, n in zip(sent, (1.0, 2.0))]
    rows = sorted_rows(wh / "airbyte" / "users")
    first = rows[0]
    assert data_of(rows, "id") == [(1,), (2,), (3,)]
    assert first["name"] == "ä €𝄞" and first["score"] == 1.25 and first["active"] is True
    assert first["updated_at"].isoformat() == "2024-05-01T10:00:00+00:00"
    assert first["local"].isoformat() == "2024-05-01T12:00:00" and first["alarm"] == "07:30:00"
    assert first["born"].isoformat() == "1990-02-03"
    assert json.loads(first["address"]) == {"city": "Köln", "n": [1, 2]} and json.loads(first["tags"]) == ["a", 1]
    assert first["either"] == "5" and "not_in_catalog" not in first
    assert first["_airbyte_extracted_at"].isoformat() == "2023-11-14T22:13:20.123000+00:00"
    assert first["_airbyte_generation_id"] == 4 and len(first["_airbyte_raw_id"]) == 36
    assert json.loads(first["_airbyte_meta"]) == {"sync_id": 9, "changes": []}
    # Values that do not fit are NULL and noted, the sync goes on.
    second = rows[1]
    assert (second["score"], second["born"], second["active"]) == (None, None, None)
    assert sorted(c["field"] for c in json.loads(second["_airbyte_meta"])["changes"]) == ["active", "born", "score"]
    assert {c["reason"] for c in json.loads(second["_airbyte_meta"])["changes"]} == {"DESTINATION_TYPECAST_ERROR"}
    # A second append adds rows.
    r = run(["write", "--config", config, "--catalog", cat], lines[:2])
    assert r.rc == 0
    assert len(sorted_rows(wh / "airbyte" / "users")) == 4


def test_buffer_bound_commits_before_the_end_and_echoes_after_commit(tmp_path, wh, engine):
    cfg = write_json(tmp_path / "small.json", {"warehouse": str(wh), "engine": engine, "buffer_bytes": 2000})
    cat = catalog(tmp_path, stream("ev", {"id": {"type": "integer"}, "v": {"type": "string"}}, "append"))
    w = Running(["write", "--config", cfg, "--catalog", cat])
    w.send([record("ev", {"id": i, "v": "x" * 100}) for i in range(5)] + [stream_state("ev", {"n": 5})])
    w.send([record("ev", {"id": i, "v": "x" * 100}) for i in range(5, 30)])  # over 2000 bytes: a commit
    state = w.wait_for(lambda m: m["type"] == "STATE")
    assert state["state"]["destinationStats"] == {"recordCount": 5.0}
    assert len(read_delta_table(str(wh / "airbyte" / "ev"))) >= 5  # committed before the echo
    res = w.close()
    assert res.rc == 0
    assert sorted(r["id"] for r in sorted_rows(wh / "airbyte" / "ev")) == list(range(30))


DEDUP = {"id": {"type": "integer"}, "v": {"type": "string"}, "cur": {"type": ["null", "integer"]},
         "_ab_cdc_deleted_at": {"type": ["null", "string"], "format": "date-time"}}


@ON_BOTH_ENGINES
def test_append_dedup_latest_wins_ties_by_extraction_and_cdc_deletes(tmp_path, wh, config):
    cat = catalog(tmp_path, stream("d", DEDUP, "append_dedup", pk=["id"], cursor="cur", generation=1, minimum=0))
    first = [
        record("d", {"id": 1, "v": "a", "cur": 5}, 1000_000_000_000),
        record("d", {"id": 1, "v": "older cursor, later record", "cur": 4}, 1000_000_000_500),
        record("d", {"id": 2, "v": "b", "cur": 1}, 1000_000_000_000),
        record("d", {"id": 3, "v": "c", "cur": 1}, 1000_000_000_000),
        record("d", {"id": 4, "v": "null cursor", "cur": None}, 1000_000_000_000),
        stream_state("d", {"n": 1}),
    ]
    assert run(["write", "--config", config, "--catalog", cat], first).rc == 0
    assert data_of(sorted_rows(wh / "airbyte" / "d"), "id", "v") == [(1, "a"), (2, "b"), (3, "c"), (4, "null cursor")]
    second = [
        record("d", {"id": 1, "v": "stale", "cur": 3}, 1000_000_001_000),          # lower cursor: loses
        record("d", {"id": 2, "v": "tie, later extraction", "cur": 1}, 1000_000_001_000),  # tie: later wins
        record("d", {"id": 3, "v": "deleted", "cur": 2, "_ab_cdc_deleted_at": "2024-01-01T00:00:00Z"}, 1000_000_001_000),
        record("d", {"id": 4, "v": "cursor beats null", "cur": 0}, 1000_000_001_000),
        record("d", {"id": 5, "v": "deleted before it existed", "cur": 1, "_ab_cdc_deleted_at": "2024-01-01T00:00:00Z"}),
        record("d", {"id": 6, "v": "new", "cur": 1}),
        stream_state("d", {"n": 2}),
    ]
    r = run(["write", "--config", config, "--catalog", cat], second)
    assert r.rc == 0 and r.states[0]["destinationStats"] == {"recordCount": 6.0}
    assert data_of(sorted_rows(wh / "airbyte" / "d"), "id", "v") == [
        (1, "a"), (2, "tie, later extraction"), (4, "cursor beats null"), (6, "new")]


def test_overwrite_is_one_swap_at_the_end(tmp_path, wh, config):
    props = {"id": {"type": "integer"}, "v": {"type": "string"}}
    cat = catalog(tmp_path, stream("snap", props, "overwrite", generation=1, minimum=1))
    assert run(["write", "--config", config, "--catalog", cat],
               [record("snap", {"id": i, "v": "old"}) for i in range(3)] + [stream_state("snap", {"n": 1})]).rc == 0
    before = delta_version(str(wh / "airbyte" / "snap"))
    cat = catalog(tmp_path, stream("snap", props, "overwrite", generation=2, minimum=2))
    cfg = json.loads(Path(config).read_text())
    small = write_json(tmp_path / "small.json", {**cfg, "buffer_bytes": 1})
    w = Running(["write", "--config", small, "--catalog", cat])
    w.send([record("snap", {"id": 10, "v": "new"}), stream_state("snap", {"n": 2})])
    w.wait_for(lambda m: m["type"] == "STATE")  # the new rows are committed (to staging) ...
    assert data_of(sorted_rows(wh / "airbyte" / "snap"), "id", "v") == [(0, "old"), (1, "old"), (2, "old")]
    w.send([record("snap", {"id": 11, "v": "new"})])
    res = w.close()
    assert res.rc == 0
    assert data_of(sorted_rows(wh / "airbyte" / "snap"), "id", "v", "_airbyte_generation_id") == [
        (10, "new", 2), (11, "new", 2)]
    assert delta_version(str(wh / "airbyte" / "snap")) > before
    assert [p.name for p in (wh / "airbyte").iterdir()] == ["snap"]  # staging dropped


def test_overwrite_of_an_incomplete_stream_keeps_the_old_table(tmp_path, wh, config):
    props = {"id": {"type": "integer"}}
    cat = catalog(tmp_path, stream("snap", props, "overwrite", generation=1, minimum=1))
    assert run(["write", "--config", config, "--catalog", cat], [record("snap", {"id": 1})]).rc == 0
    cat = catalog(tmp_path, stream("snap", props, "overwrite", generation=2, minimum=2))
    r = run(["write", "--config", config, "--catalog", cat],
            [record("snap", {"id": 2}), stream_state("snap", {"n": 1}), stream_status("snap", "INCOMPLETE")])
    assert r.rc == 0 and len(r.states) == 1
    assert data_of(sorted_rows(wh / "airbyte" / "snap"), "id") == [(1,)]
    # A retry of the same generation resumes the staged rows, then swaps.
    r = run(["write", "--config", config, "--catalog", cat], [record("snap", {"id": 3}), stream_status("snap", "COMPLETE")])
    assert r.rc == 0
    assert data_of(sorted_rows(wh / "airbyte" / "snap"), "id") == [(2,), (3,)]


# ---- hostile input --------------------------------------------------------------------------------
def _hostile(tmp_path, wh, config, bad_line, words, mode="append"):
    props = {"id": {"type": "integer"}, "v": {"type": "string"}}
    cat = catalog(tmp_path, stream("t", props, mode, pk=["id"] if mode == "append_dedup" else None))
    lines = [record("t", {"id": 1, "v": "covered"}), stream_state("t", {"s": 1}, id=1),
             record("t", {"id": 2, "v": "after the last state"}), bad_line,
             record("t", {"id": 3, "v": "after the bad line"}), stream_state("t", {"s": 2}, id=2)]
    r = run(["write", "--config", config, "--catalog", cat], lines)
    assert r.rc == 1
    (err,) = r.errors
    assert err["failure_type"] == "system_error"
    for w in words:
        assert w in err["message"]
    assert [s["id"] for s in r.states] == [1]  # never a state for uncommitted data
    assert data_of(sorted_rows(wh / "airbyte" / "t"), "id", "v") == [(1, "covered")]
    assert "SECRET" not in json.dumps(r.messages)


@pytest.mark.parametrize("bad_line, words", [
    ('{"type": "RECORD", "record": {"stream": "t", "data": {"id": 9, "v": "SECRET"', ["line 4", "not JSON"]),
    ("SECRET not json at all", ["line 4", "not JSON"]),
    ('["a", "list"]', ["line 4", "not a JSON object"]),
    ('{"type": "RECORD", "record": {"stream": "t", "data": "SECRET", "emitted_at": 1}}', ["line 4", "record.data"]),
    ('{"type": "NOPE"}', ["line 4", "not a valid AirbyteMessage"]),
    (record("nobody", {"id": 1, "v": "SECRET"}), ["line 4", "'nobody'", "catalog"]),
], ids=["truncated", "text", "list", "data_not_object", "unknown_type", "unknown_stream"])
def test_bad_input_commits_what_the_last_state_covers_then_fails(tmp_path, wh, config, bad_line, words):
    _hostile(tmp_path, wh, config, bad_line, words)


def test_stdin_closing_mid_record_commits_only_what_the_last_state_covers(tmp_path, wh, config):
    """The source (or the platform) is gone in the middle of a message: the cut-off last line
    is never committed, nor are the records after the last state; that state is echoed."""
    props = {"id": {"type": "integer"}, "v": {"type": "string"}}
    cat = catalog(tmp_path, stream("t", props, "append_dedup", pk=["id"]))
    w = Running(["write", "--config", config, "--catalog", cat])
    w.send([record("t", {"id": 1, "v": "covered"}), stream_state("t", {"s": 1}, id=1),
            record("t", {"id": 2, "v": "after the last state"})])
    whole = record("t", {"id": 3, "v": "SECRET cut off"})
    w.proc.stdin.write(whole[: len(whole) - 3].encode())        # no closing braces, no newline
    r = w.close()
    assert r.rc == 1
    (err,) = r.errors
    assert err["failure_type"] == "system_error" and "line 4" in err["message"]
    assert "ends without a newline" in err["message"] and "SECRET" not in json.dumps(r.messages)
    assert [s["id"] for s in r.states] == [1]
    assert data_of(sorted_rows(wh / "airbyte" / "t"), "id", "v") == [(1, "covered")]


@pytest.mark.parametrize("data, words", [
    ({"v": "SECRET"}, ["primary key field 'id'"]),
    ({"id": "SECRET", "v": "x"}, ["'id'", "does not fit", "LONG"]),
], ids=["missing_key", "key_of_wrong_type"])
def test_records_whose_key_cannot_be_written_stop_the_sync(tmp_path, wh, config, data, words):
    _hostile(tmp_path, wh, config, record("t", data), words, mode="append_dedup")


def test_huge_record_loses_its_largest_fields_not_the_sync(tmp_path, wh, engine):
    cfg = write_json(tmp_path / "c.json", {"warehouse": str(wh), "engine": engine, "max_record_bytes": 4096})
    props = {"id": {"type": "integer"}, "big": {"type": "string"}, "small": {"type": "string"}}
    cat = catalog(tmp_path, stream("h", props, "append_dedup", pk=["id"]))
    r = run(["write", "--config", cfg, "--catalog", cat],
            [record("h", {"id": 1, "big": "x" * 100_000, "small": "kept"}), stream_state("h", {"n": 1})])
    assert r.rc == 0 and len(r.states) == 1
    (row,) = sorted_rows(wh / "airbyte" / "h")
    assert (row["id"], row["big"], row["small"]) == (1, None, "kept")
    assert json.loads(row["_airbyte_meta"])["changes"] == [
        {"field": "big", "change": "NULLED", "reason": "DESTINATION_RECORD_SIZE_LIMITATION"}]
    # A key that alone is too big cannot be written: the sync stops.
    r = run(["write", "--config", cfg, "--catalog", catalog(tmp_path, stream("h2", {"id": {"type": "string"}},
                                                                              "append_dedup", pk=["id"]))],
            [record("h2", {"id": "k" * 10_000})])
    assert r.rc == 1 and "larger than 4096 bytes" in r.errors[0]["message"]


@pytest.mark.parametrize("streams, words", [
    ([stream("t", {"id": {"type": "integer"}}, "append_dedup")], "needs a primary key"),
    ([stream("../escape", {"id": {"type": "integer"}}, "append")], "path separator"),
    ([stream("t", {"a": {"type": "string"}, "A": {"type": "string"}}, "append")], "differ only in case"),
    ([stream("t", {"_airbyte_meta": {"type": "string"}}, "append")], "collides"),
    ([stream("t", {"id": {"type": "integer"}}, "update")], "not supported"),
    ([stream("t", {"id": {"type": "object"}}, "append_dedup", pk=["id", "id.x"])], "nested"),
], ids=["dedup_no_key", "unsafe_name", "case_collision", "system_collision", "unknown_mode", "nested"])
def test_unusable_catalog_is_a_config_error_and_writes_nothing(tmp_path, wh, config, streams, words):
    if words == "nested":
        streams[0]["primary_key"] = [["id", "x"]]
    r = run(["write", "--config", config, "--catalog", catalog(tmp_path, *streams)], [record("t", {"id": 1})])
    assert r.rc == 1
    (err,) = r.errors
    assert err["failure_type"] == "config_error" and words in err["message"]
    assert not wh.exists() or not any(wh.rglob("_delta_log"))


def test_write_with_bad_config_is_a_config_error(tmp_path):
    r = run(["write", "--config", write_json(tmp_path / "c.json", {"engine": "sail"}),
             "--catalog", catalog(tmp_path)], [])
    assert r.rc == 1 and r.errors[0]["failure_type"] == "config_error"


def test_odd_names_land_as_given(tmp_path, wh, config):
    # Column names may be any UTF-8. Schema/table names stay ASCII here: Sail 0.7.2 percent-encodes
    # directory names with spaces or non-ASCII letters on disk (a core/engine issue, both doors).
    props = {"a b,c;{}()=": {"type": "string"}, "ünï €": {"type": "integer"}, "id": {"type": "integer"},
             "column.with.dots": {"type": "string"}, "select": {"type": "string"}, "`tick`": {"type": "string"}}
    for mode in ("append", "append_dedup", "overwrite"):
        cat = catalog(tmp_path, stream(f"Users.v2-x_y_{mode}", props, mode, pk=["id"], namespace="Ns_1"))
        r = run(["write", "--config", config, "--catalog", cat],
                [record(f"Users.v2-x_y_{mode}", {"id": 1, "a b,c;{}()=": "x", "ünï €": 7, "column.with.dots": "d",
                                                 "select": "s", "`tick`": "t"}, namespace="Ns_1")])
        assert r.rc == 0, r.errors
        (row,) = sorted_rows(wh / "Ns_1" / f"Users.v2-x_y_{mode}")
        assert [row[c] for c in ("a b,c;{}()=", "ünï €", "column.with.dots", "select", "`tick`")] == [
            "x", 7, "d", "s", "t"]


# ---- crash and resume --------------------------------------------------------------------------------
def test_kill_9_mid_write_then_rerun_from_the_last_echoed_state_converges(tmp_path, wh, engine):
    cfg = write_json(tmp_path / "c.json", {"warehouse": str(wh), "engine": engine, "buffer_bytes": 3000})
    cat = catalog(tmp_path, stream("k", DEDUP, "append_dedup", pk=["id"], cursor="cur", generation=1),
                  stream("log", {"id": {"type": "integer"}}, "append"))
    # The source: 40 keys, each updated 3 times, a state after every 10 records.
    messages, expected, n = [], {}, 0
    for version in range(3):
        for i in range(40):
            messages.append(record("k", {"id": i, "v": f"v{version}", "cur": version}, 1_700_000_000_000 + n))
            messages.append(record("log", {"id": n}))
            expected[i] = f"v{version}"
            n += 1
            if n % 10 == 0:
                messages.append(stream_state("k", {"n": n}, id=n))
    w = Running(["write", "--config", cfg, "--catalog", cat])
    w.send(messages[: len(messages) * 2 // 3])
    last = w.wait_for(lambda m: m["type"] == "STATE" and m["state"]["id"] >= 20)
    os.kill(w.proc.pid, signal.SIGKILL)
    w.proc.wait(30)
    while True:  # states that made it out before the kill
        line = w.out.get(timeout=30)
        if line is None:
            break
        msg = json.loads(line)
        if msg["type"] == "STATE":
            last = msg
    resume_at = next(i for i, m in enumerate(messages) if m == stream_state("k", {"n": last["state"]["id"]}, id=last["state"]["id"]))
    r = run(["write", "--config", cfg, "--catalog", cat], messages[resume_at + 1:])
    assert r.rc == 0
    assert r.states and r.states[-1]["id"] == n - n % 10
    rows = sorted_rows(wh / "airbyte" / "k")
    assert {r["id"]: r["v"] for r in rows} == expected and len(rows) == 40
    # Append is at least once: every record is there (those after the last echo maybe twice).
    assert {r["id"] for r in sorted_rows(wh / "airbyte" / "log")} == set(range(n))


# ---- generations ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["append", "append_dedup"])
def test_refresh_drops_older_generations_at_the_end(tmp_path, wh, config, mode):
    key = {"pk": ["id"], "cursor": "cur"} if mode == "append_dedup" else {}

    def sync(gen, minimum, data, extra=()):
        cat = catalog(tmp_path, stream("g", DEDUP, mode, generation=gen, minimum=minimum, **key))
        r = run(["write", "--config", config, "--catalog", cat], [record("g", d) for d in data] + list(extra))
        assert r.rc == 0, r.errors
        return data_of(sorted_rows(wh / "airbyte" / "g"), "id", "v", "_airbyte_generation_id")

    assert sync(1, 0, [{"id": 1, "v": "a", "cur": 9}, {"id": 2, "v": "b", "cur": 9}]) == [(1, "a", 1), (2, "b", 1)]
    # A refresh re-reads everything: a lower cursor of the new generation still wins, and rows the
    # new generation did not send are gone at the end.
    assert sync(2, 2, [{"id": 1, "v": "a2", "cur": 1}]) == [(1, "a2", 2)]
    # An ordinary sync (minimum 0) keeps every generation; PyAirbyte's constant 1/1 keeps generation 1 rows.
    assert sync(3, 0, [{"id": 3, "v": "c", "cur": 1}]) == [(1, "a2", 2), (3, "c", 3)]
    # An incomplete stream drops nothing.
    assert sync(4, 4, [{"id": 4, "v": "d", "cur": 1}], [stream_status("g", "INCOMPLETE")]) == [
        (1, "a2", 2), (3, "c", 3), (4, "d", 4)]


def test_kill_9_mid_overwrite_then_retries_of_the_same_generation_land_each_row_once(tmp_path, wh, engine):
    cfg = write_json(tmp_path / "c.json", {"warehouse": str(wh), "engine": engine, "buffer_bytes": 2500})
    props = {"id": {"type": "integer"}, "v": {"type": "string"}}
    assert run(["write", "--config", cfg, "--catalog", catalog(tmp_path, stream("o", props, "overwrite", generation=1))],
               [record("o", {"id": -1, "v": "old"})]).rc == 0
    cat = catalog(tmp_path, stream("o", props, "overwrite", generation=2, minimum=2))
    messages = []
    for i in range(120):
        messages.append(record("o", {"id": i, "v": "x" * 40}))
        if i % 10 == 9:
            messages.append(stream_state("o", {"n": i + 1}, id=i + 1))
    # Attempt 1: killed after some states were echoed (and rows past them staged by a full buffer).
    w = Running(["write", "--config", cfg, "--catalog", cat])
    w.send(messages[: len(messages) * 2 // 3])
    last = w.wait_for(lambda m: m["type"] == "STATE" and m["state"]["id"] >= 30)
    os.kill(w.proc.pid, signal.SIGKILL)
    w.proc.wait(30)
    while (line := w.out.get(timeout=30)) is not None:
        if json.loads(line)["type"] == "STATE":
            last = json.loads(line)
    assert data_of(sorted_rows(wh / "airbyte" / "o"), "id") == [(-1,)]  # readers still see the old table
    # Attempt 2 (same generation) resumes after the last echoed state.
    resume_at = messages.index(stream_state("o", {"n": last["state"]["id"]}, id=last["state"]["id"]))
    r = run(["write", "--config", cfg, "--catalog", cat], messages[resume_at + 1:])
    assert r.rc == 0
    assert data_of(sorted_rows(wh / "airbyte" / "o"), "id") == [(i,) for i in range(120)]


def test_overwrite_retry_without_any_echoed_state_starts_over(tmp_path, wh, engine):
    cfg = write_json(tmp_path / "c.json", {"warehouse": str(wh), "engine": engine, "buffer_bytes": 500})
    cat = catalog(tmp_path, stream("o", {"id": {"type": "integer"}}, "overwrite", generation=5, minimum=5))
    rows = [record("o", {"id": i}) for i in range(50)]
    # A source without checkpoints fails half way: rows were staged (full buffer) but nothing echoed.
    r = run(["write", "--config", cfg, "--catalog", cat], rows[:30] + [stream_status("o", "INCOMPLETE")])
    assert r.rc == 0 and r.states == []
    assert any("airbyte_tmp_" in p.name for p in (wh / "airbyte").iterdir())  # the staging table (on-disk spelling: docs/names.md)
    # The retry sends everything again: each row lands once.
    r = run(["write", "--config", cfg, "--catalog", cat], rows)
    assert r.rc == 0
    assert data_of(sorted_rows(wh / "airbyte" / "o"), "id") == [(i,) for i in range(50)]
    assert "_airbyte_tmp_seq" not in sorted_rows(wh / "airbyte" / "o")[0]


def test_a_waiting_state_is_committed_and_echoed_after_the_flush_interval(tmp_path, wh, engine):
    cfg = write_json(tmp_path / "c.json", {"warehouse": str(wh), "engine": engine, "flush_interval_seconds": 0.5})
    cat = catalog(tmp_path, stream("slow", {"id": {"type": "integer"}}, "append"))
    w = Running(["write", "--config", cfg, "--catalog", cat])
    w.wait_for(lambda m: m["type"] == "LOG" and "CreateTable" in m["log"]["message"])  # reading input now
    # The source goes silent after a state: the state is committed and echoed anyway.
    w.send([record("slow", {"id": 1}), stream_state("slow", {"n": 1}, id=1)])
    assert w.wait_for(lambda m: m["type"] == "STATE", timeout=60)["state"]["id"] == 1
    assert [r["id"] for r in sorted_rows(wh / "airbyte" / "slow")] == [1]
    # A busy source: the next record finds the state waited long enough.
    w.send([record("slow", {"id": 2}), stream_state("slow", {"n": 2}, id=2)])
    import time
    time.sleep(1.0)
    w.send([record("slow", {"id": 3})])
    assert w.wait_for(lambda m: m["type"] == "STATE", timeout=60)["state"]["id"] == 2
    assert w.close().rc == 0
    assert [r["id"] for r in sorted_rows(wh / "airbyte" / "slow")] == [1, 2, 3]


def test_a_write_whose_engine_jvm_dies_ends_promptly(tmp_path, wh, door_process):
    """kill -9 of the local Spark JVM a `write` started, mid-sync: the process still ends soon
    after its input does (a failure answered as a TRACE error, or the engine restarted and the
    sync completed), never held for minutes by the dead engine's client (process_exit.py); and
    every state it echoed is in the table."""
    import time

    import psutil

    cfg = write_json(tmp_path / "c.json", {"warehouse": str(wh), "engine": "spark", "buffer_bytes": 3000})
    cat = catalog(tmp_path, stream("k", DEDUP, "append_dedup", pk=["id"], cursor="cur", generation=1))
    w = Running(["write", "--config", cfg, "--catalog", cat])
    w.send([record("k", {"id": i, "v": "a", "cur": 1}) for i in range(20)] + [stream_state("k", {"n": 1}, id=1)])
    w.wait_for(lambda m: m["type"] == "STATE", timeout=300)          # committed through the JVM
    jvms = spark_jvms_below(w.proc.pid)
    assert jvms, "the write started no JVM of its own"
    for p in jvms:
        try:
            p.kill()
        except psutil.NoSuchProcess:  # it ended on its own since the walk above
            pass
    w.send([record("k", {"id": i, "v": "b", "cur": 2}) for i in range(20)] + [stream_state("k", {"n": 2}, id=2)])
    began = time.monotonic()
    result = w.close(timeout=240)
    took = time.monotonic() - began
    print(f"the write ended {took:.1f}s after its input, rc {result.rc}")
    if result.rc == 0:
        assert result.states[-1]["id"] == 2
        assert {r["id"]: r["v"] for r in sorted_rows(wh / "airbyte" / "k")} == {i: "b" for i in range(20)}
    else:
        assert result.errors and "engine" in result.errors[-1]["message"].lower(), result.errors
        assert {r["id"]: r["v"] for r in sorted_rows(wh / "airbyte" / "k")} == {i: "a" for i in range(20)}
    assert not [p for p in jvms if running(p.pid)]
