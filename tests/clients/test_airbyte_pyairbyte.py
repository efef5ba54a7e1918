"""The real client: PyAirbyte drives airbyte-source-faker into our command (both as local
executables, each in its own virtualenv made by scripts/airbyte_client_venvs.sh), and the
Delta tables are compared with what the source emits for the same config."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from testkit.delta_read import read_delta_table
from testkit.airbyte_cli import ON_BOTH_ENGINES, engine  # noqa: F401

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
STREAMS = ["users", "products", "purchases"]
FAKER = {"count": 120, "seed": 42, "parallelism": 1, "always_updated": False, "records_per_slice": 50}


@pytest.fixture(scope="module")
def clients():
    out = subprocess.run([str(ROOT / "scripts" / "airbyte_client_venvs.sh")], capture_output=True, text=True,
                         env={**os.environ, "PYTHON": os.environ.get("PYTHON", "python3.11")}, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    faker, python = out.stdout.split()[-2:]
    return {"faker": faker, "python": python}


@pytest.fixture(scope="module")
def emitted(clients, tmp_path_factory):
    """What source-faker emits for FAKER: {stream: {id: data}} and each stream's JSON schema."""
    d = tmp_path_factory.mktemp("faker")
    (d / "config.json").write_text(json.dumps(FAKER))
    disc = subprocess.run([clients["faker"], "discover", "--config", str(d / "config.json")],
                          capture_output=True, text=True, timeout=300, check=True)
    streams = [json.loads(line)["catalog"]["streams"] for line in disc.stdout.splitlines()
               if line.startswith("{") and json.loads(line).get("type") == "CATALOG"][0]
    cat = {"streams": [{"stream": s, "sync_mode": "full_refresh", "destination_sync_mode": "overwrite"} for s in streams]}
    (d / "catalog.json").write_text(json.dumps(cat))
    read = subprocess.run([clients["faker"], "read", "--config", str(d / "config.json"), "--catalog",
                           str(d / "catalog.json")], capture_output=True, text=True, timeout=600, check=True)
    out = {s: {} for s in STREAMS}
    for line in read.stdout.splitlines():
        if line.startswith("{"):
            m = json.loads(line)
            if m.get("type") == "RECORD":
                out[m["record"]["stream"]][m["record"]["data"]["id"]] = m["record"]["data"]
    schemas = {s["name"]: s["json_schema"]["properties"] for s in streams}
    return out, schemas


def pyairbyte_write(clients, tmp_path, wh, engine, strategy, cache=False, extra_config=None):
    args = {"destination": str(ROOT / ".venv" / "bin" / "airbyte-delta-destination"), "faker": clients["faker"],
            "dest_config": {"warehouse": str(wh), "engine": engine, **(extra_config or {})}, "faker_config": FAKER,
            "streams": STREAMS, "strategy": strategy, "cache": cache, "state_dir": str(tmp_path)}
    p = subprocess.run([clients["python"], str(ROOT / "testkit" / "pyairbyte_driver.py"), json.dumps(args)],
                       capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    assert json.loads(p.stdout.strip().splitlines()[-1])["ok"]


def rows(wh, stream):
    return read_delta_table(str(wh / "airbyte" / stream)).to_pylist()


def same_value(schema: dict, sent, stored) -> bool:
    if sent is None:
        return stored is None
    fmt = schema.get("format")
    if fmt == "date-time":
        ts = datetime.fromisoformat(sent)
        return (ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)) == stored  # no offset: read as UTC
    if fmt == "date":
        return sent == stored.isoformat()
    types = schema.get("type")
    types = [types] if isinstance(types, str) else [t for t in types or [] if t != "null"]
    if types in (["object"], ["array"]) or len(types) != 1:
        return json.loads(stored) == sent
    if types == ["number"]:
        return float(sent) == stored
    return sent == stored


def assert_matches_source(wh, emitted, copies=1):
    data, schemas = emitted
    for stream in STREAMS:
        got = rows(wh, stream)
        assert len(got) == copies * len(data[stream]), stream
        assert {r["id"] for r in got} == set(data[stream])
        for r in got:
            sent = data[stream][r["id"]]
            for field, schema in schemas[stream].items():
                if field == "updated_at":  # faker stamps the time of the read: checked by the callers
                    assert isinstance(r[field], datetime)
                    continue
                assert same_value(schema, sent.get(field), r[field]), (stream, r["id"], field)
            assert r["_airbyte_raw_id"] and r["_airbyte_extracted_at"] is not None
            assert r["_airbyte_generation_id"] == 1  # PyAirbyte always sends generation 1
            assert json.loads(r["_airbyte_meta"])["sync_id"] == 1


@ON_BOTH_ENGINES
def test_pyairbyte_merge_twice_keeps_one_row_per_key(clients, emitted, tmp_path, engine, door_process):
    """On Spark both syncs reach the session's shared JVM (spark_remote in the destination's config)."""
    wh = tmp_path / "warehouse"
    pyairbyte_write(clients, tmp_path, wh, engine, "merge", extra_config=door_process(engine))
    assert_matches_source(wh, emitted)
    first = {r["id"]: r["updated_at"] for r in rows(wh, "users")}
    pyairbyte_write(clients, tmp_path, wh, engine, "merge", extra_config=door_process(engine))
    assert_matches_source(wh, emitted)
    # The second read stamped every record later (faker's updated_at is the read time): the
    # newer cursor won for every key.
    second = {r["id"]: r["updated_at"] for r in rows(wh, "users")}
    assert all(second[k] > first[k] for k in first)


def test_pyairbyte_append_then_replace(clients, emitted, tmp_path, engine):
    wh = tmp_path / "warehouse"
    pyairbyte_write(clients, tmp_path, wh, engine, "append")
    assert_matches_source(wh, emitted)
    pyairbyte_write(clients, tmp_path, wh, engine, "append")  # generation 1 again: nothing is dropped
    assert_matches_source(wh, emitted, copies=2)
    pyairbyte_write(clients, tmp_path, wh, engine, "replace")
    assert_matches_source(wh, emitted)


def test_pyairbyte_default_cache_replay(clients, emitted, tmp_path, engine):
    """PyAirbyte's default path: records go through its DuckDB cache and are replayed from there
    (extra _airbyte_* keys in data, emitted_at in seconds)."""
    wh = tmp_path / "warehouse"
    pyairbyte_write(clients, tmp_path, wh, engine, "merge", cache=True)
    assert_matches_source(wh, emitted)
    for r in rows(wh, "users"):
        assert r["_airbyte_extracted_at"].year >= 2024


def test_pyairbyte_destination_smoke_test_all_scenarios(clients, tmp_path, engine):
    """`pyab destination-smoke-test`: PyAirbyte's edge-case streams (types, unions, nulls, odd column
    names, unicode, wide, empty, duplicate keys, 1000-row batch) into one namespace."""
    wh = tmp_path / "warehouse"
    cfg = tmp_path / "dest.json"
    cfg.write_text(json.dumps({"warehouse": str(wh), "engine": engine}))
    bin_dir = str(Path(clients["python"]).parent)
    p = subprocess.run([str(Path(bin_dir) / "pyab"), "destination-smoke-test",
                        f"--destination={ROOT / '.venv' / 'bin' / 'airbyte-delta-destination'}",
                        f"--config={cfg}", "--scenarios=all"],
                       capture_output=True, text=True, timeout=900, cwd=tmp_path,
                       env={**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"],
                            "AIRBYTE_OFFLINE_MODE": "1", "DO_NOT_TRACK": "1"})
    report = json.loads(p.stdout[p.stdout.index("\n{") + 1:p.stdout.rindex("}") + 1])
    assert report["success"], report["error"]
    assert report["records_delivered"] > 1000
    (ns,) = [d for d in wh.iterdir() if d.name.startswith("zz_deleteme")]
    tables = {t.name: read_delta_table(str(t)).to_pylist() for t in ns.iterdir()}
    assert len(tables["large_batch_stream"]) == 1000 and tables["empty_stream"] == []
    dup = tables["duplicate_primary_keys"]  # six records, three keys: one row each (append_dedup)
    assert len(dup) == len({r["id"] for r in dup}) == 3
    (names,) = tables["column_naming_edge_cases"]
    assert {"column.with.dots", "column with spaces", "column-with-dashes", "select", "CamelCaseColumn"} <= set(names)
    assert all(not json.loads(r["_airbyte_meta"])["changes"] for rows in tables.values() for r in rows)
