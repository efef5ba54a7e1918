"""Lineage from the Airbyte and Conduit doors (issue 12: every door's writes produce schema-valid
OpenLineage events naming the table by its canonical URI). Each door runs as its real process,
configured the client's standard way (OPENLINEAGE__TRANSPORT__* -> file transport); events are
validated offline against the OpenLineage JSON Schemas, the output dataset's identity is checked
against lineage.uris and its version against the Delta log read with delta-rs. Engine: embedded Sail.
The Fivetran door is covered by test_lineage_fivetran.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from testkit.airbyte_cli import record as airbyte_record
from testkit.airbyte_cli import run, stream, stream_state, write_json
from testkit.conduit_records import connector_config
from delta_destination.lineage import table_uri
from delta_destination.lineage.uris import openlineage_name
from testkit.conduit_host import CREATE, DELETE, UPDATE, PluginProcess
from testkit.conduit_host import record as conduit_record
from testkit.delta_read import delta_version, read_delta_table, rows_by_key
from testkit.openlineage_check import EventValidator, read_events, runs, wait_for

ENGINE = "sail"  # explicitly the embedded engine, whatever DELTA_TEST_ENGINES says
pytestmark = pytest.mark.usefixtures("door_process")  # each door runs as its own process


def transport_env(events: Path) -> dict:
    return {"OPENLINEAGE__TRANSPORT__TYPE": "file", "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(events),
            "OPENLINEAGE__TRANSPORT__APPEND": "true"}




def ordered_runs(events: list[dict]) -> list[list[dict]]:
    """Every event schema-valid; runs in the order they started, each exactly START then an end."""
    validator = EventValidator()
    for e in events:
        assert validator.errors(e) == [], (e["eventType"], validator.errors(e))
    by_run = runs(events)
    ordered = [by_run[k] for k in dict.fromkeys(e["run"]["runId"] for e in events)]
    for r in ordered:
        assert [e["eventType"] for e in r] in (["START", "COMPLETE"], ["START", "FAIL"]), r
    return ordered


def output(run_events: list[dict]) -> dict:
    (out,) = run_events[-1]["outputs"]
    return out


def assert_names_table(run_events: list[dict], uri: str) -> None:
    """Both events of the run name the table by the canonical URI's OpenLineage identity."""
    ol = openlineage_name(uri)
    for e in run_events:
        (out,) = e["outputs"]
        assert (out["namespace"], out["name"]) == (ol.namespace, ol.name), (out["namespace"], out["name"], uri)
        assert out["facets"]["storage"]["storageLayer"] == "delta"


def test_airbyte_write_emits_schema_valid_runs_with_uri_version_and_counts(tmp_path, monkeypatch):
    events_path = tmp_path / "openlineage.jsonl"
    for k, v in transport_env(events_path).items():
        monkeypatch.setenv(k, v)  # the `write` subprocess inherits the environment
    monkeypatch.delenv("OPENLINEAGE_URL", raising=False)
    monkeypatch.delenv("OPENLINEAGE_NAMESPACE", raising=False)
    wh = tmp_path / "wh"
    cfg = write_json(tmp_path / "config.json", {"warehouse": str(wh), "engine": ENGINE})
    props = {"id": {"type": "integer"}, "name": {"type": "string"}}
    cat = write_json(tmp_path / "catalog.json", {"streams": [
        stream("users", props, "append_dedup", pk=["id"], cursor="id")]})
    location = wh / "airbyte" / "users"
    uri = table_uri(str(wh), "airbyte", "users")
    assert uri == f"file://{location}"

    first = run(["write", "--config", cfg, "--catalog", cat],
                [airbyte_record("users", {"id": 1, "name": "a"}), airbyte_record("users", {"id": 2, "name": "b"}),
                 airbyte_record("users", {"id": 3, "name": "c"}), stream_state("users", {"c": 3})])
    assert first.rc == 0, first.stderr[-2000:]
    v_first = delta_version(str(location))
    later = 1_700_000_001_000  # same cursor value: the later extraction wins (dedup's tie-break)
    second = run(["write", "--config", cfg, "--catalog", cat],
                 [airbyte_record("users", {"id": 2, "name": "B"}, emitted_at=later),
                  airbyte_record("users", {"id": 4, "name": "d"}, emitted_at=later),
                  stream_state("users", {"c": 4})])
    assert second.rc == 0, second.stderr[-2000:]
    v_second = delta_version(str(location))
    rows = read_delta_table(str(location)).to_pylist()
    assert sorted((r["id"], r["name"]) for r in rows) == [(1, "a"), (2, "B"), (3, "c"), (4, "d")]

    # The process flushes its queue before exit, so every event is on file once `write` returns.
    events = read_events(events_path)
    create, write1, write2 = ordered_runs(events)  # no other runs: append_dedup stages nothing
    for r in (create, write1, write2):
        assert_names_table(r, uri)
        assert r[-1]["eventType"] == "COMPLETE"
        assert r[-1]["job"]["namespace"] == "airbyte-delta" and r[-1]["job"]["name"] == "airbyte.users"
        assert r[-1]["job"]["facets"]["jobType"]["integration"] == "AIRBYTE_DELTA"
        fields = [f["name"] for f in output(r)["facets"]["schema"]["fields"]]
        assert {"id", "name", "_airbyte_raw_id", "_airbyte_extracted_at"} <= set(fields)
    assert create[-1]["job"]["facets"]["jobType"]["jobType"] == "CREATE_TABLE"
    assert output(create)["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "CREATE"
    assert output(create)["facets"]["version"]["datasetVersion"] == str(v_first - 1)
    # The engine's counts from the commit: the second write inserted id 4 and replaced id 2.
    for r, version, counts in ((write1, v_first, (3, 0, 0)), (write2, v_second, (1, 1, 0))):
        out = output(r)
        assert r[-1]["job"]["facets"]["jobType"]["jobType"] == "AIRBYTE_WRITE"
        assert out["facets"]["version"]["datasetVersion"] == str(version)
        commit = out["outputFacets"]["deltaDestination_commit"]
        assert commit["door"] == "airbyte" and commit["operation"] == "AirbyteWrite"
        assert (commit["inserted"], commit["updated"], commit["deleted"]) == counts
        assert out["outputFacets"]["outputStatistics"]["rowCount"] == counts[0] + counts[1]
    assert v_second == v_first + 1


def test_airbyte_overwrite_reports_the_real_table_not_its_staging_table(tmp_path, monkeypatch):
    """An overwrite collects rows in a working table and swaps them in with one commit: lineage
    names the table the user reads (the swap is its OVERWRITE), never the staging table."""
    events_path = tmp_path / "openlineage.jsonl"
    for k, v in transport_env(events_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("OPENLINEAGE_URL", raising=False)
    wh = tmp_path / "wh"
    cfg = write_json(tmp_path / "config.json", {"warehouse": str(wh), "engine": ENGINE})
    cat = write_json(tmp_path / "catalog.json", {"streams": [
        stream("snap", {"id": {"type": "integer"}}, "overwrite")]})
    location = wh / "airbyte" / "snap"
    uri = table_uri(str(wh), "airbyte", "snap")
    for ids in ([1, 2], [3]):
        done = run(["write", "--config", cfg, "--catalog", cat],
                   [*(airbyte_record("snap", {"id": i}) for i in ids), stream_state("snap", {"c": ids[-1]})])
        assert done.rc == 0, done.stderr[-2000:]
    assert sorted(r["id"] for r in read_delta_table(str(location)).to_pylist()) == [3]
    assert not any(p.name.startswith("=2Eairbyte_tmp") for p in (wh / "airbyte").iterdir())

    ordered = ordered_runs(read_events(events_path))
    assert ordered
    for r in ordered:
        assert_names_table(r, uri)
        assert r[-1]["eventType"] == "COMPLETE"
    lifecycles = [output(r)["facets"].get("lifecycleStateChange", {}).get("lifecycleStateChange") for r in ordered]
    assert lifecycles.count("OVERWRITE") == 2, lifecycles
    swap = ordered[lifecycles.index("OVERWRITE", lifecycles.index("OVERWRITE") + 1)]
    assert output(swap)["facets"]["version"]["datasetVersion"] == str(delta_version(str(location)))


def test_conduit_batch_emits_schema_valid_runs_with_uri_version_and_counts(tmp_path):
    events_path = tmp_path / "openlineage.jsonl"
    wh = tmp_path / "wh"
    p = PluginProcess(tmp_path / "plugin.log", extra_env=transport_env(events_path))
    try:
        stream_run = p.open({**connector_config(wh, **{"sdk.batch.size": 4, "sdk.batch.delay": "300ms"}),
                             "engine": ENGINE})
        meta = {"opencdc.collection": "users"}
        recs = [conduit_record(i, CREATE, key={"id": i}, after={"id": i, "name": f"user{i}"}, metadata=meta)
                for i in (1, 2, 3, 4)]
        stream_run.send(*recs)
        assert [a.error for a in stream_run.wait_acks(4)] == [""] * 4
        location = wh / "conduit" / "users"
        v_first = delta_version(str(location))
        more = [conduit_record(5, UPDATE, key={"id": 2}, after={"id": 2, "name": "renamed"}, metadata=meta),
                conduit_record(6, DELETE, key={"id": 3}, metadata=meta),
                conduit_record(7, CREATE, key={"id": 9}, after={"id": 9, "name": "new"}, metadata=meta),
                conduit_record(8, CREATE, key={"id": 10}, after={"id": 10, "name": "newer"}, metadata=meta)]
        stream_run.send(*more)
        assert [a.error for a in stream_run.wait_acks(8)] == [""] * 8  # cumulative
        v_second = delta_version(str(location))
        p.stop(more[-1].position)
        stream_run.close()
        p.teardown()
        p.kill_gracefully()
    finally:
        p.close()
    got = rows_by_key(location, ["id"])
    assert {k: r["name"] for k, r in got.items()} == {(1,): "user1", (2,): "renamed", (4,): "user4",
                                                        (9,): "new", (10,): "newer"}

    uri = table_uri(str(wh), "conduit", "users")
    assert uri == f"file://{location}"
    events = wait_for(lambda: read_events(events_path), 6)
    create, batch1, batch2 = ordered_runs(events)
    for r in (create, batch1, batch2):
        assert_names_table(r, uri)
        assert r[-1]["eventType"] == "COMPLETE"
        assert r[-1]["job"]["namespace"] == "conduit-delta" and r[-1]["job"]["name"] == "conduit.users"
        assert r[-1]["job"]["facets"]["jobType"]["integration"] == "CONDUIT_DELTA"
    assert create[-1]["job"]["facets"]["jobType"]["jobType"] == "CREATE_TABLE"
    assert output(create)["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "CREATE"
    # The engine's counts: the second batch inserted 9 and 10, updated 2, deleted 3.
    for r, version, counts in ((batch1, v_first, (4, 0, 0)), (batch2, v_second, (2, 1, 1))):
        out = output(r)
        assert out["facets"]["version"]["datasetVersion"] == str(version)
        commit = out["outputFacets"]["deltaDestination_commit"]
        assert commit["door"] == "conduit"
        assert (commit["inserted"], commit["updated"], commit["deleted"]) == counts, commit
    assert v_second == v_first + 1
