"""The embedded engine, supervised (engines/supervisor.py): Sail runs in a process of its own that is
replaced between requests when it grows past its bound, and whose death fails only the requests it
was serving. The operator sees it in the metrics endpoint (delta_destination/metrics.py).

The supervisor tests at the top run real Sail processes in the test process (fast tier); the rest
run real destination servers (full tier)."""
from __future__ import annotations

import threading
import time
import urllib.request

import grpc
import psutil
import pytest

from delta_destination.engines.sail import SailProcess, sail_environment
from delta_destination.engines.pool import EnginePool
from delta_destination.engines.supervisor import RecyclePolicy, SupervisedEngine
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.settings import Settings
from delta_destination.storage import StorageOptions
from testkit.delta_read import delta_version, read_delta_table
from testkit.processes import running, sail_engines_below
from testkit.server_process import free_port
from testkit.fivetran_requests import batch_file, col, table, write_request

TABLE = table("orders", col("id", "LONG", pk=True), col("v", "STRING"))


def wait_until(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# ---- the supervisor with real Sail processes (no destination server) -------------------------------

def supervisor(policy: RecyclePolicy, forgotten: list) -> SupervisedEngine:
    env = sail_environment(StorageOptions())
    return SupervisedEngine(lambda: SailProcess(env), policy, forgotten.append)


def test_a_replaced_process_serves_its_last_lease_then_stops():
    forgotten: list[str] = []
    sup = supervisor(RecyclePolicy(max_memory_bytes=0, max_requests=2), forgotten)
    try:
        first = sup.acquire()
        held = sup.acquire()                      # a second request on the same process
        sup.release(first)                        # 1 request served
        assert sup.current_url() == first.url
        sup.release(sup.acquire())                # 2 served: a replacement starts in the background
        wait_until(lambda: sup.current_url() != first.url, what="the replacement to become current")
        # The old process is still running: a lease holds it, and new leases go to the new one.
        assert first.process.alive() and first.url not in forgotten
        new = sup.acquire()
        assert new.url != first.url and new.number == 2
        sup.release(new)
        sup.release(held)                         # its last lease: now it stops
        wait_until(lambda: not first.process.alive(), what="the replaced process to stop")
        assert forgotten == [first.url]
        assert sup.pids() == [new.process.pid]
    finally:
        sup.stop()
    assert sup.pids() == []


def test_a_process_over_its_memory_bound_is_replaced_and_a_dead_one_restarted():
    forgotten: list[str] = []
    sup = supervisor(RecyclePolicy(max_memory_bytes=1, max_requests=0, min_requests=1), forgotten)   # any is over 1 byte
    try:
        first = sup.acquire()
        sup.release(first)
        wait_until(lambda: sup.current_url() not in ("", first.url), what="the replacement")
        wait_until(lambda: not first.process.alive(), what="the replaced process to stop")
        second = sup.acquire()
        second.process._proc.kill()               # a crash while a request holds it
        second.process._proc.wait()
        sup.release(second)
        third = sup.acquire()                     # the next request gets a fresh process
        assert third.process.alive() and third.url != second.url
        assert second.url in forgotten
        sup.release(third)
    finally:
        sup.stop()
    assert sup.pids() == []


def test_a_derived_bound_follows_the_warm_size_and_an_engine_that_outgrows_it_soon_is_a_warning():
    """The bound is the process's own size once warm + the headroom: an engine that then holds more
    (here: the test parks 4 x 16 MiB of rows in the engine's session, as a leak would) is replaced
    at the end of the next request, and since that came long before `horizon` requests it is a
    warning and an early replacement in the metrics; its replacement is warm again on its own."""
    import logging

    import pyarrow as pa

    from delta_destination import metrics
    from delta_destination.engines.pool import connect

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__()
            self.records = []

        def emit(self, record):
            self.records.append(record)

    lines = Lines()
    logger = logging.getLogger("delta_destination.engines.supervisor")
    logger.addHandler(lines)
    def early() -> float:
        return metrics.REGISTRY.get_sample_value("delta_destination_engine_early_replacements_total",
                                                 {"engine": "sail"}) or 0.0

    early_before = early()
    forgotten: list[str] = []
    policy = RecyclePolicy(max_memory_bytes=0, headroom_bytes=32 * 2**20, min_requests=2)
    sup = supervisor(policy, forgotten)
    try:
        first = sup.acquire()
        sup.release(first)
        sup.release(sup.acquire())                 # 2 served: warm, and its bound is fixed now
        assert first.warm_bytes and policy.bound(first.warm_bytes) == first.warm_bytes + 32 * 2**20
        held = sup.acquire()
        spark = connect(held.url, {})
        block = pa.table({"v": [b"x" * 1024] * (16 * 1024)})   # 16 MiB
        for i in range(4):
            spark.createDataFrame(block).createOrReplaceTempView(f"parked_{i}")
        spark.stop()                               # the session ends; what the engine keeps stays
        assert held.process.resident_bytes() > policy.bound(first.warm_bytes)
        sup.release(held)
        wait_until(lambda: sup.current_url() not in ("", first.url), what="the replacement")
        warnings = [r.getMessage() for r in lines.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "replaced by pid" in warnings[0] and "faster than the headroom" in warnings[0]
        assert "MiB once warm + 32 MiB headroom" in warnings[0], warnings
        assert early() == early_before + 1
        second = sup.acquire()
        assert second.warm_bytes is None and second.number == 2
        sup.release(second)
    finally:
        logger.removeHandler(lines)
        sup.stop()
    assert sup.pids() == []


def test_a_statement_on_a_dead_engine_fails_at_once_and_the_next_lease_works(tmp_path):
    """The client does not retry a port whose process is gone (half a minute with its policy)."""
    engines = EnginePool()
    settings = Settings.create(str(tmp_path / "wh"), engine="sail")
    try:
        with engines.lease(settings) as session:
            assert session.rows("probe", "SELECT 1") == [(1,)]
            (pid,) = engines.sail_pids()
            psutil.Process(pid).kill()
            wait_until(lambda: not running(pid), what="the engine to die")
            began = time.monotonic()
            with pytest.raises(Exception) as info:
                session.rows("probe", "SELECT 2")
            assert type(info.value).__name__ == "EngineUnavailable"
            assert time.monotonic() - began < 5
        with engines.lease(settings) as session:
            assert session.rows("probe", "SELECT 3") == [(3,)]
        assert engines.sail_pids() and engines.sail_pids()[0] != pid
    finally:
        engines.stop()
    assert engines.sail_pids() == []


# ---- through a destination server --------------------------------------------------------------------

def create(stub, schema: str) -> None:
    stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=TABLE), timeout=120)


def upsert(stub, tmp_path, schema: str, ids, value: str, timeout: float = 300):
    path, key = batch_file(tmp_path, TABLE, [{"id": i, "v": value} for i in ids])
    return stub.WriteBatch(write_request(schema, TABLE, replace=[(path, key)]), timeout=timeout)


def rows_of(srv, schema: str) -> dict:
    data = read_delta_table(str(srv.warehouse / schema / "orders")).to_pydict()
    return dict(zip(data["id"], data["v"]))


def test_kill_9_of_the_engine_mid_request_fails_only_that_request(tmp_path, dedicated_server):
    srv = dedicated_server(tmp_path / "wh", tmp_path / "server.log")   # the default engine: auto, Sail
    create(srv.stub, "crash")
    upsert(srv.stub, tmp_path, "crash", range(1000), "before")
    before = rows_of(srv, "crash")
    (engine,) = sail_engines_below(srv.proc.pid)

    # A request that keeps the engine busy for a while: 400k rows, all keys stored ones or new.
    outcome: dict = {}

    def big_write():
        try:
            outcome["response"] = upsert(srv.stub, tmp_path, "crash", range(400_000), "after")
        except grpc.RpcError as exc:
            outcome["error"] = exc

    writer = threading.Thread(target=big_write)
    cpu = sum(engine.cpu_times()[:2])
    version = delta_version(str(srv.warehouse / "crash" / "orders"))
    writer.start()
    # Once the engine works on the request (its CPU time moves), stop it where it is, and kill it
    # there: a crash in the middle of the request's statements (the log says whether it had committed).
    wait_until(lambda: sum(engine.cpu_times()[:2]) > cpu + 0.05 or not writer.is_alive(), timeout=120,
               what="the engine to work on the request")
    engine.suspend()
    committed_before_the_kill = delta_version(str(srv.warehouse / "crash" / "orders")) != version
    engine.kill()
    writer.join(120)
    assert not writer.is_alive(), "the request hung after its engine died"
    after = rows_of(srv, "crash")
    print(f"the request {'failed: ' + outcome['error'].details() if 'error' in outcome else 'committed before the kill'}")
    assert committed_before_the_kill or "error" in outcome, "the engine died before the commit, yet the request succeeded"
    if "error" in outcome:
        err = outcome["error"]
        assert err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL), (err.code(), err.details())
        assert "unavailable" in err.details().lower() or "engine" in err.details().lower(), err.details()
        assert after == before, "a failed request changed the table"
    else:   # it committed just before the kill
        assert after == {i: "after" for i in range(400_000)}
    # The next request gets a fresh engine and succeeds; the table is right after it.
    upsert(srv.stub, tmp_path, "crash", range(5), "next")
    (fresh,) = sail_engines_below(srv.proc.pid)
    assert fresh.pid != engine.pid
    assert {k: rows_of(srv, "crash")[k] for k in range(5)} == {k: "next" for k in range(5)}
    log = srv.log_text()
    assert "was killed by SIGKILL" in log and "the next one starts a new process" in log
    srv.stop()
    assert not running(engine.pid) and not running(fresh.pid), "an engine process outlived the destination"


def test_requests_in_flight_span_engine_replacements_without_a_failure(tmp_path, dedicated_server):
    """Replaced after every 3 requests while 4 requests are in flight on 4 tables: every request
    succeeds, every table ends right, and replaced processes do not linger."""
    srv = dedicated_server(tmp_path / "wh", tmp_path / "server.log", extra_args=("--engine-max-requests", "3"))
    schemas = [f"s{i}" for i in range(4)]
    for s in schemas:
        create(srv.stub, s)
    first = {p.pid for p in sail_engines_below(srv.proc.pid)}
    errors: list = []

    def rounds(schema: str):
        try:
            for r in range(8):
                upsert(srv.stub, tmp_path, schema, range(r * 10, r * 10 + 20), f"r{r}")
        except grpc.RpcError as exc:
            errors.append((schema, exc.code(), exc.details()))

    threads = [threading.Thread(target=rounds, args=(s,)) for s in schemas]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors
    for s in schemas:
        got = rows_of(srv, s)
        assert len(got) == 90 and got[0] == "r0" and got[75] == "r7" and got[80] == "r7" and got[15] == "r1"
    log = srv.log_text()
    assert log.count("replaced by pid") >= 5, log[-3000:]
    wait_until(lambda: len(sail_engines_below(srv.proc.pid)) == 1, what="replaced processes to stop")
    assert not first & {p.pid for p in sail_engines_below(srv.proc.pid)}


def scrape(port: int) -> dict:
    """The endpoint's samples: (name, frozenset(labels)) -> value, parsed by Prometheus's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return {"text": text, "samples": samples}


def value(samples: dict, name: str, **labels) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def test_the_metrics_endpoint_counts_requests_rows_commits_engines_and_memory(tmp_path, dedicated_server):
    port = free_port()
    srv = dedicated_server(tmp_path / "wh", tmp_path / "server.log",
                           extra_args=("--metrics-port", f"127.0.0.1:{port}", "--engine-max-requests", "2"))
    schema = "Secret_Customer_Schema"
    create(srv.stub, schema)
    upsert(srv.stub, tmp_path, schema, range(30), "a")
    upsert(srv.stub, tmp_path, schema, range(20, 40), "b")        # 10 updates, 10 inserts
    with pytest.raises(grpc.RpcError):                              # a request of no known table
        srv.stub.DescribeTable(pb.DescribeTableRequest(schema_name=schema, table_name="../x"), timeout=60)
    wait_until(lambda: value(scrape(port)["samples"], "delta_destination_engine_restarts_total", cause="requests") >= 1,
               what="a replacement to be counted")
    got = scrape(port)
    s, text = got["samples"], got["text"]
    assert value(s, "delta_destination_requests_total", door="fivetran", request="WriteBatch", outcome="success") == 2
    assert value(s, "delta_destination_requests_total", door="fivetran", request="CreateTable", outcome="success") == 1
    assert value(s, "delta_destination_requests_total", door="fivetran", request="DescribeTable",
                 outcome="invalid_argument") == 1
    assert value(s, "delta_destination_rows_total", door="fivetran", operation="insert") == 40
    assert value(s, "delta_destination_rows_total", door="fivetran", operation="update") == 10
    assert value(s, "delta_destination_commit_seconds_count", door="fivetran") >= 2
    assert value(s, "delta_destination_engine_choices_total", engine="sail") >= 3
    assert value(s, "delta_destination_engine_resident_bytes", engine="sail") > 10 * 2**20
    assert value(s, "delta_destination_engine_processes", engine="sail") >= 1
    assert value(s, "process_resident_memory_bytes") > 10 * 2**20
    # No table or schema name in any label (table names are customer data).
    assert "orders" not in text and "Secret_Customer_Schema" not in text
