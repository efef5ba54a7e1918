"""Small files compacted in the background (core/compaction.py): a stream of small batches on
the embedded engine ends with few live files, the same rows, and a compaction commit that changes
no data; writes after it still merge correctly."""
from __future__ import annotations

import json
import time
from pathlib import Path

from deltalake import DeltaTable

from testkit.delta_read import read_delta_table, recent_operations
from testkit.fivetran_requests import batch_file, col, table, write_request
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb

SCHEMA = "compaction"
T = table("stream", col("id", "LONG", pk=True), col("name", "STRING"), col("n", "LONG"))


def _operations(location: Path) -> list[str]:
    """Every commit's operation, oldest first (the table has far fewer than 1,000)."""
    return recent_operations(str(location), 1000)


def _wait_for(predicate, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_small_files_are_compacted_in_the_background_without_changing_rows(tmp_path, dedicated_server):
    srv = dedicated_server(tmp_path / "warehouse", tmp_path / "server.log", engine="sail",
                           env={"DELTA_DESTINATION_COMPACT_SMALL_FILES": "6"})
    try:
        assert srv.stub.CreateTable(pb.CreateTableRequest(schema_name=SCHEMA, table=T)).success
        location = Path(srv.warehouse) / SCHEMA / "stream"
        expected: dict[int, dict] = {}
        files = tmp_path / "files"
        files.mkdir()
        for i in range(7):   # each batch: two new keys and one stored key changed -> a small file each
            rows = [{"id": 2 * i, "name": f"a{i}", "n": i}, {"id": 2 * i + 1, "name": f"b{i}", "n": i}]
            if i:
                rows.append({"id": 0, "name": f"changed{i}", "n": 100 + i})
            for r in rows:
                expected[r["id"]] = r
            f = batch_file(files, T, rows)
            assert srv.stub.WriteBatch(write_request(SCHEMA, T, replace=[f]), timeout=120).success
        assert _wait_for(lambda: "OPTIMIZE" in _operations(location)), \
            "no compaction commit after 7 small commits with compact_small_files=6"
        assert _operations(location).count("OPTIMIZE") == 1
        dt = DeltaTable(str(location))
        assert len(dt.file_uris()) < 6, "the small files were not replaced by fewer ones"
        history = {h["version"]: h for h in dt.history()}
        compacted_at = max(v for v, h in history.items() if h["operation"] == "OPTIMIZE")
        # What a reader sees did not change at the compaction commit (dataChange=false, same rows).
        before = DeltaTable(str(location), version=compacted_at - 1).to_pyarrow_table().sort_by("id")
        after = DeltaTable(str(location), version=compacted_at).to_pyarrow_table().sort_by("id")
        assert before.equals(after)
        log_line = (location / "_delta_log" / f"{compacted_at:020d}.json").read_text()
        adds = [json.loads(x)["add"] for x in log_line.splitlines() if '"add"' in x]
        assert adds and all(a["dataChange"] is False for a in adds)
        # A write after the compaction merges into the compacted files.
        f = batch_file(files, T, [{"id": 1, "name": "after", "n": -1}, {"id": 99, "name": "new", "n": 99}])
        assert srv.stub.WriteBatch(write_request(SCHEMA, T, replace=[f]), timeout=120).success
        expected[1] = {"id": 1, "name": "after", "n": -1}
        expected[99] = {"id": 99, "name": "new", "n": 99}
        got = {r["id"]: {k: r[k] for k in ("id", "name", "n")}
               for r in read_delta_table(str(location)).to_pylist() if not r.get("_fivetran_deleted")}
        assert got == expected
        assert "compacted compaction.stream: " in srv.log_text()
    finally:
        srv.stop()


def test_a_compaction_is_mirrored_as_iceberg_at_once(tmp_path, dedicated_server):
    """With iceberg on, the background compaction's commit gets its Iceberg snapshot right after it
    (not with the table's next request): the Iceberg side then lists the compacted files and reads
    as the Delta table at the OPTIMIZE version."""
    from testkit.iceberg_read import assert_in_step
    from testkit.iceberg_requests import on
    srv = dedicated_server(tmp_path / "warehouse", tmp_path / "server.log", engine="sail",
                           env={"DELTA_DESTINATION_COMPACT_SMALL_FILES": "6"})
    assert srv.stub.CreateTable(on(pb.CreateTableRequest(schema_name=SCHEMA, table=T))).success
    location = Path(srv.warehouse) / SCHEMA / "stream"
    files = tmp_path / "files"
    files.mkdir()
    for i in range(7):
        f = batch_file(files, T, [{"id": 2 * i, "name": f"a{i}", "n": i}, {"id": 2 * i + 1, "name": f"b{i}", "n": i}])
        assert srv.stub.WriteBatch(on(write_request(SCHEMA, T, replace=[f])), timeout=120).success
    assert _wait_for(lambda: "OPTIMIZE" in _operations(location))
    dt = DeltaTable(str(location))
    assert _wait_for(lambda: f"mirrored Delta versions up to {dt.version()}" in srv.log_text()), srv.log_text()[-3000:]
    assert assert_in_step(str(location)) == dt.version()
    from testkit.iceberg_read import iceberg_table
    listed = sorted(f.file.file_path.rsplit("/", 1)[-1] for f in iceberg_table(str(location)).scan().plan_files())
    assert listed == sorted(u.rsplit("/", 1)[-1] for u in dt.file_uris())
