"""Load: concurrent writers on many tables and contended writes to one table lose and duplicate
nothing; memory stays bounded; a remote engine that restarts mid-load is retried, and one that
stays down is reported clearly."""
from __future__ import annotations

import datetime as dt
import os
import random
import socket
import signal
import subprocess
import sys
import threading
import time

import grpc
import psutil
import pytest

from testkit.fivetran_requests import batch_file, col, table, write_request
from testkit.server_process import free_port
from testkit.delta_read import read_delta_table
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb

T0 = dt.datetime(2024, 6, 1, tzinfo=dt.timezone.utc)


def _table(name):
    return table(name, col("id", "LONG", pk=True), col("writer", "INT"), col("n", "LONG"), col("v", "STRING"),
                 col("_fivetran_synced", "UTC_DATETIME"), col("_fivetran_deleted", "BOOLEAN"))


class Writer:
    """Applies random upserts/updates/deletes to its own key range and keeps the exact expected state."""

    def __init__(self, stub, schema, t, writer_id, tmp, seed, key_base):
        self.stub, self.schema, self.t, self.wid, self.tmp = stub, schema, t, writer_id, tmp
        self.rng = random.Random(seed)
        self.base = key_base
        self.expected: dict[int, tuple] = {}
        self.errors: list = []
        self.batches = 0

    def step(self, i):
        ts = T0 + dt.timedelta(seconds=i)
        keys = [self.base + self.rng.randrange(200) for _ in range(30)]
        keys = list(dict.fromkeys(keys))
        up, upd, dele = keys[:15], keys[15:22], keys[22:]
        replace = [{"id": k, "writer": self.wid, "n": i, "v": f"w{self.wid}-{i}", "_fivetran_synced": ts, "_fivetran_deleted": False} for k in up]
        update = [{"id": k, "n": i * 10, "_fivetran_synced": ts} for k in upd]
        delete = [{"id": k, "_fivetran_synced": ts} for k in dele]
        req = write_request(
            self.schema, self.t,
            replace=[batch_file(self.tmp, self.t, replace)],
            update=[batch_file(self.tmp, self.t, update, kind="update", columns=["id", "n", "_fivetran_synced"])] if update else [],
            delete=[batch_file(self.tmp, self.t, delete, kind="delete", columns=["id", "_fivetran_synced"])] if delete else [],
        )
        assert self.stub.WriteBatch(req, timeout=300).success
        for r in replace:
            self.expected[r["id"]] = (self.wid, i, r["v"])
        for k in upd:
            if k in self.expected:
                w, _, v = self.expected[k]
                self.expected[k] = (w, i * 10, v)
        for k in dele:
            self.expected.pop(k, None)
        self.batches += 1

    def run(self, deadline, max_steps):
        try:
            i = 0
            while i < max_steps and time.time() < deadline:
                self.step(i)
                i += 1
        except Exception as exc:  # noqa: BLE001
            self.errors.append(exc)


def _state(path, wid=None):
    rows = read_delta_table(path).to_pylist()
    return {r["id"]: (r["writer"], r["n"], r["v"]) for r in rows if wid is None or r["writer"] == wid}


def _run_load(srv, tmp_path, seconds, max_steps):
    schema = "load"
    own = [_table(f"own{i}") for i in range(8)]
    shared = _table("shared")
    for t in [*own, shared]:
        assert srv.stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=t)).success
    writers = [Writer(srv.stub, schema, t, i, tmp_path, seed=i, key_base=0) for i, t in enumerate(own)]
    # contended: four writers on one table, disjoint key ranges, so the exact final state is known
    writers += [Writer(srv.stub, schema, shared, 100 + i, tmp_path, seed=100 + i, key_base=10_000 * (i + 1)) for i in range(4)]
    proc = psutil.Process(srv.proc.pid)
    peak = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], proc.memory_info().rss)
            except psutil.Error:
                pass
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    deadline = time.time() + seconds
    threads = [threading.Thread(target=w.run, args=(deadline, max_steps)) for w in writers]
    for th in threads:
        th.start()
    for th in threads:
        th.join(seconds + 600)
    stop.set()
    assert not any(th.is_alive() for th in threads), "a writer is stuck (deadlock?)"
    errors = [e for w in writers for e in w.errors]
    assert not errors, errors[:3]
    rows_checked = 0
    for w in writers[:8]:
        got = _state(f"{srv.warehouse}/{schema}/own{w.wid}")
        assert got == w.expected, f"own{w.wid}: lost or extra rows"
        rows_checked += len(got)
    shared_state = _state(f"{srv.warehouse}/{schema}/shared")
    expected_shared = {}
    for w in writers[8:]:
        expected_shared.update(w.expected)
    assert shared_state == expected_shared
    rows_checked += len(shared_state)
    return sum(w.batches for w in writers), rows_checked, peak[0]


def test_concurrent_load_short(tmp_path, dedicated_server):
    srv = dedicated_server(tmp_path / "wh", tmp_path / "log")
    try:
        batches, rows, peak = _run_load(srv, tmp_path, seconds=30, max_steps=6)
        assert batches >= 12 * 3 and rows > 0
        assert peak < 3 * 2**30, f"server RSS {peak / 2**30:.2f} GB"
    finally:
        srv.stop()


@pytest.mark.slow
def test_concurrent_load_minutes(tmp_path, dedicated_server):
    srv = dedicated_server(tmp_path / "wh", tmp_path / "log")
    try:
        batches, rows, peak = _run_load(srv, tmp_path, seconds=180, max_steps=10_000)
        print(f"load: {batches} batches, {rows} rows checked, peak RSS {peak / 2**30:.2f} GB")
        assert peak < 3 * 2**30
    finally:
        srv.stop()


def _start_sail(port, log):
    return subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "sail"), "spark", "server", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)


def _wait_port(port, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("engine did not start")


def test_remote_engine_restart_is_retried_and_outage_reported(tmp_path, dedicated_server):
    """A remote Spark Connect engine (Sail in its own process) restarts between requests: the next
    request succeeds; while it is down, requests fail with UNAVAILABLE naming the engine."""
    port = free_port()
    log = open(tmp_path / "sail.log", "ab")
    engine = _start_sail(port, log)
    _wait_port(port)
    srv = dedicated_server(tmp_path / "wh", tmp_path / "log", extra_args=("--engine", "sail", "--spark-remote", f"sc://127.0.0.1:{port}"))
    try:
        t = _table("r")
        assert srv.stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=t)).success
        w = Writer(srv.stub, "s", t, 1, tmp_path, seed=1, key_base=0)
        w.step(0)
        engine.kill()
        engine.wait()
        with pytest.raises(grpc.RpcError) as info:
            w.step(1)
        assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL), info.value.details()
        assert "engine" in info.value.details().lower()
        engine = _start_sail(port, log)
        _wait_port(port)
        w.step(2)  # the destination reconnects; the catalog entry is re-registered
        assert _state(f"{srv.warehouse}/s/r") == w.expected
        # The engine dies for good, then the destination is stopped: it stops promptly (PySpark's
        # session release retried the dead engine for many minutes; it hung a destination 19 min).
        engine.kill()
        engine.wait()
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(60) == 0
        assert "destination stopped" in srv.log_text()
    finally:
        srv.stop()
        engine.kill()
        engine.wait()
        log.close()
