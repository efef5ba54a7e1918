"""Destination processes on a real S3 warehouse (SeaweedFS): kill -9 in the middle of a staged
batch, and two processes writing one table at once.

- Crash: a server started as a user would (AWS_* environment, `--warehouse s3://...`), with a
  small local-relation limit so every batch is staged on S3, is killed with SIGKILL at random
  moments of a WriteBatch. After a restart the table is exactly before or after the request,
  nothing staged is left (the restart removes what the dead process staged), and the replay
  converges to the after-state.
- Two writers: two destination processes commit to one table concurrently; every commit is
  kept (Sail writes the log with put-if-absent; Spark through the project's S3 log store, both
  retry the loser), so every key of both lands.
"""
from __future__ import annotations

import random
import signal
import threading
import time
import uuid

import grpc
import pytest

from testkit.fivetran_requests import batch_file, col, table, write_request
from testkit.delta_read import delta_version, read_delta_table
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.private_areas import STAGING_DIR

T = table("crash", col("id", "LONG", pk=True), col("v", "STRING"), col("n", "LONG"))


def rows_of(path) -> dict:
    return {r["id"]: (r["v"], r["n"]) for r in read_delta_table(path).to_pylist()}


def start(dedicated_server, s3_server, tmp_path, engine, warehouse, name, **env):
    return dedicated_server(warehouse, tmp_path / f"{name}.log", engine=engine,
                            env={**s3_server.env(), **env})


@pytest.mark.parametrize("engine_name", ["sail", "spark"])
def test_kill_9_during_a_staged_batch_on_s3(dedicated_server, s3_server, tmp_path, engine_name):
    warehouse = s3_server.url(f"crash-{uuid.uuid4().hex[:8]}/wh")
    prefix = warehouse.split("/", 3)[3]
    small = {"FIVETRAN_DELTA_LOCAL_RELATION_LIMIT": "2048"}   # every batch below is staged on S3
    srv = start(dedicated_server, s3_server, tmp_path, engine_name, warehouse, "first", **small)
    assert srv.stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=T)).success
    base = [{"id": i, "v": "base", "n": i} for i in range(3000)]
    srv.stub.WriteBatch(write_request("s", T, replace=[batch_file(tmp_path, T, base)]))
    path = f"{warehouse}/s/crash"
    rng = random.Random(17)
    state = {r["id"]: (r["v"], r["n"]) for r in base}
    for trial in range(3):
        changed = [{"id": i, "v": f"t{trial}", "n": -i} for i in range(trial * 300, trial * 300 + 1200)]
        request = write_request("s", T, replace=[batch_file(tmp_path, T, changed)],
                                delete=[batch_file(tmp_path, T, [{"id": 2999 - trial}], kind="delete")])
        after = dict(state)
        after.update({r["id"]: (r["v"], r["n"]) for r in changed})
        after.pop(2999 - trial, None)
        before_version = delta_version(path)
        done = []
        t = threading.Thread(target=lambda: done.append(_try(srv.stub.WriteBatch, request)))
        t.start()
        time.sleep(rng.uniform(0.3, 6.0))
        srv.stop(signal.SIGKILL)
        t.join(60)
        srv = start(dedicated_server, s3_server, tmp_path, engine_name, warehouse, f"trial{trial}", **small)
        got, version = rows_of(path), delta_version(path)
        assert (got, version) in ((state, before_version), (after, before_version + 1)), f"trial {trial}"
        if done and done[0] is True:
            assert got == after   # answered success: committed
        assert s3_server.list_keys(f"{prefix}/{STAGING_DIR}/") == []   # the restart removed what was staged
        assert srv.stub.WriteBatch(request).success   # the replay converges
        assert rows_of(path) == after
        assert s3_server.list_keys(f"{prefix}/{STAGING_DIR}/") == []
        state = after
    srv.stop()


def _try(call, request):
    try:
        return call(request, timeout=300).success
    except grpc.RpcError:
        return False


def test_two_destination_processes_writing_one_table_keep_every_commit(dedicated_server, s3_server, tmp_path, shared_spark):
    """A Sail destination and a Spark destination (two processes, two engines) commit to one table
    on S3 at the same time: no commit is lost, both see their keys land."""
    warehouse = s3_server.url(f"two-{uuid.uuid4().hex[:8]}/wh")
    sail = start(dedicated_server, s3_server, tmp_path, "sail", warehouse, "sail")
    spark = start(dedicated_server, s3_server, tmp_path, "spark", warehouse, "spark")
    assert sail.stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=T)).success
    path = f"{warehouse}/s/crash"
    per_writer = 8
    errors: list[str] = []

    def write(srv, first_id):
        for k in range(per_writer):
            rows = [{"id": first_id + k, "v": f"w{first_id}", "n": k}]
            try:
                assert srv.stub.WriteBatch(write_request("s", T, replace=[batch_file(tmp_path, T, rows)]),
                                           timeout=600).success
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(f"{first_id}: {exc!r}")

    threads = [threading.Thread(target=write, args=(sail, 1000)), threading.Thread(target=write, args=(spark, 2000))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(1200)
    assert errors == []
    got = rows_of(path)
    assert sorted(got) == [1000 + k for k in range(per_writer)] + [2000 + k for k in range(per_writer)]
    assert delta_version(path) == 2 * per_writer   # one commit each (after the create), none lost
