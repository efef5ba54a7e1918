"""Table upkeep: `fivetran-delta-destination maintain` and the server's periodic upkeep, on
real tables written through the server; delta-rs reads the results back."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from deltalake import DeltaTable

from testkit.fivetran_requests import batch_file, col, table, write_request
from delta_destination.errors import InvalidRequest
from delta_destination.core.upkeep import UpkeepOptions
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from testkit.delta_read import delta_version, read_delta_table
from testkit.server_process import ROOT

T = table("events", col("id", "INT", pk=True), col("v", "STRING"))


def test_vacuum_retention_below_deltas_safety_window_is_refused():
    with pytest.raises(InvalidRequest, match="168"):
        UpkeepOptions(retention_hours=24)
    assert UpkeepOptions().retention_hours == 168


def fill(stub, schema, tmp_path, batches=6):
    """Many small commits: upserts in separate batches, then deletes (deletion vectors on Spark)."""
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=T)).success
    for b in range(batches):
        rows = [{"id": b * 100 + i, "v": f"v{b}-{i}"} for i in range(100)]
        stub.WriteBatch(write_request(schema, T, replace=[batch_file(tmp_path, T, rows)]))
    gone = [{"id": b * 100 + i} for b in range(batches) for i in range(0, 100, 7)]
    stub.WriteBatch(write_request(schema, T, delete=[batch_file(tmp_path, T, gone, kind="delete")]))
    return {b * 100 + i for b in range(batches) for i in range(100) if i % 7}


def maintain(*args):
    return subprocess.run([sys.executable, "-m", "delta_destination.doors.fivetran.main", "maintain", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_maintain_compacts_purges_and_vacuums_without_changing_rows(stub, server, engine, unique_schema, tmp_path):
    ids = fill(stub, unique_schema, tmp_path)
    location = f"{server.warehouse}/{unique_schema}/events"
    before = read_delta_table(location)
    files_before = len(DeltaTable(location).file_uris())
    version = delta_version(location)
    r = maintain("--warehouse", str(server.warehouse), "--schema", unique_schema, "--table", "events", *server.engine_args)
    after = read_delta_table(location)
    assert sorted(after.to_pylist(), key=lambda x: x["id"]) == sorted(before.to_pylist(), key=lambda x: x["id"])
    assert {x["id"] for x in after.to_pylist()} == ids
    if engine == "sail":
        # Sail 0.7.2 has no OPTIMIZE, REORG or VACUUM: said plainly, pointing at the Spark engine.
        assert r.returncode == 2, r.stderr
        assert "not available: compact" in r.stdout and "--engine spark" in r.stdout
        assert delta_version(location) == version
        return
    assert r.returncode == 0, r.stdout + r.stderr
    assert "done: compact, purge_deletion_vectors, vacuum" in r.stdout
    dt = DeltaTable(location)
    assert len(dt.file_uris()) < files_before
    ops = [h["operation"] for h in dt.history()]
    assert "OPTIMIZE" in ops and any(op.startswith("VACUUM") for op in ops)
    # Nothing newer than the retention window was deleted: old versions are still readable.
    assert DeltaTable(location, version=version).version() == version
    assert read_delta_table_at(location, version) == sorted(x["id"] for x in before.to_pylist())


def read_delta_table_at(location, version):
    from deltalake import QueryBuilder
    import pyarrow as pa

    dt = DeltaTable(location, version=version)
    got = pa.table(QueryBuilder().register("t", dt).execute("SELECT id FROM t").read_all())
    return sorted(got.column("id").to_pylist())


def test_idle_time_comes_from_commit_files_only(tmp_path):
    import os

    from delta_destination.core.delta_log import commit_entries, has_commits, last_commit_time
    from delta_destination.core.table_dirs import table_location
    from delta_destination.warehouse import Warehouse

    wh = Warehouse(str(tmp_path))
    table = tmp_path / "s" / "t"
    location = table_location(wh, "s", "t")
    assert location == str(table)
    assert not has_commits(wh, location) and last_commit_time(wh, location) == 0.0
    log_dir = table / "_delta_log"
    log_dir.mkdir(parents=True)
    (log_dir / "_last_checkpoint").write_text("{}")
    (log_dir / "00000000000000000000.crc").write_text("{}")
    assert not has_commits(wh, location)
    commit = log_dir / "00000000000000000000.json"
    commit.write_text("{}")
    os.utime(commit, (1_000_000, 1_000_000))
    os.utime(log_dir / "_last_checkpoint", (2_000_000, 2_000_000))  # not a commit: does not count
    assert has_commits(wh, location)
    assert [e.location for e in commit_entries(wh, location)] == [str(commit)]
    assert last_commit_time(wh, location) == 1_000_000


def test_maintain_refuses_unknown_tables_and_short_retention(tmp_path):
    r = maintain("--warehouse", str(tmp_path), "--schema", "s", "--table", "missing", "--engine", "sail")
    assert r.returncode == 1 and "does not exist" in r.stderr
    r = maintain("--warehouse", str(tmp_path), "--retention-hours", "1", "--engine", "sail")
    assert r.returncode == 1 and "168" in r.stderr


@pytest.mark.parametrize("engine_name", ["spark"])
def test_periodic_upkeep_runs_on_idle_tables(tmp_path, engine_name, dedicated_server):
    srv = dedicated_server(tmp_path / "wh", tmp_path / "log", engine=engine_name,
                           extra_args=("--upkeep-interval-hours", "0.002", "--upkeep-idle-minutes", "0"))
    try:
        ids = fill(srv.stub, "s", tmp_path, batches=3)
        location = f"{srv.warehouse}/s/events"
        deadline = time.time() + 300
        while "upkeep s.events: done: compact, purge_deletion_vectors, vacuum" not in srv.log_text():
            assert time.time() < deadline, srv.log_text()[-2000:]
            time.sleep(2)
        assert "OPTIMIZE" in [h["operation"] for h in DeltaTable(location).history()]
        assert {x["id"] for x in read_delta_table(location).to_pylist()} == ids
    finally:
        srv.stop()
