"""The process contract: flags, listening addresses, JSON logs, health, graceful SIGTERM."""
from __future__ import annotations

import json
import signal
import socket
import threading

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from testkit.fivetran_requests import batch_file, col, table, write_request
from testkit.delta_read import read_delta_table
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb, destination_sdk_pb2_grpc as pb_grpc


def test_logs_are_fivetran_json_lines(server):
    lines = [l for l in server.log_text().splitlines() if l.startswith("{")]
    assert lines, "no JSON log lines"
    for line in lines:
        obj = json.loads(line)
        assert obj["level"] in ("INFO", "WARNING", "SEVERE")
        assert obj["message-origin"] == "sdk_destination"
        assert isinstance(obj["message"], str) and obj["message"]


def test_listens_on_ipv4_and_ipv6(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5):
        pass
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        return  # no IPv6 on this machine: IPv4 alone is the SDK's fallback
    try:
        s.settimeout(5)
        s.connect(("::1", server.port))
    except OSError:
        # IPv6 may exist without a loopback address in a sandbox; then IPv4 is what counts
        pass
    finally:
        s.close()


def test_health_serving(server):
    h = health_pb2_grpc.HealthStub(server.channel)
    assert h.Check(health_pb2.HealthCheckRequest(service="")).status == health_pb2.HealthCheckResponse.SERVING


def test_sigterm_drains_in_flight_request(tmp_path, dedicated_server):
    srv = dedicated_server(tmp_path / "wh", tmp_path / "log")
    t = table("drain", col("id", "LONG", pk=True), col("v", "STRING"), col("_fivetran_synced", "UTC_DATETIME"))
    srv.stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=t))
    import datetime as dt
    now = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    rows = [{"id": i, "v": "x" * 20, "_fivetran_synced": now} for i in range(200_000)]
    req = write_request("s", t, replace=[batch_file(tmp_path, t, rows)])
    result = {}

    def call():
        try:
            result["ok"] = srv.stub.WriteBatch(req, timeout=300).success
        except grpc.RpcError as exc:
            result["err"] = exc

    th = threading.Thread(target=call)
    th.start()
    import time
    time.sleep(0.5)  # the request is being read / merged
    srv.proc.send_signal(signal.SIGTERM)
    th.join(300)
    code = srv.proc.wait(120)
    srv.stop()
    assert result.get("ok") is True, result
    assert code == 0
    assert read_delta_table(f"{tmp_path}/wh/s/drain").num_rows == 200_000
    assert "destination stopped" in (tmp_path / "log").read_text()


def test_log_lines_carry_fivetran_account_and_group(tmp_path, dedicated_server):
    """FIVETRAN_ACCOUNT_NAME / FIVETRAN_GROUP_NAME are context on every line (trimmed, one line)."""
    srv = dedicated_server(tmp_path / "wh", tmp_path / "log",
                           env={"FIVETRAN_ACCOUNT_NAME": "  acme\ncorp ", "FIVETRAN_GROUP_NAME": "\tlake_dest "})
    try:
        resp = srv.stub.DescribeTable(pb.DescribeTableRequest(schema_name="s", table_name="missing"), timeout=60)
        assert resp.not_found
    finally:
        srv.stop()
    lines = [json.loads(l) for l in (tmp_path / "log").read_text().splitlines() if l.startswith("{")]
    assert len(lines) >= 3
    for obj in lines:
        assert obj["message"].endswith(" [fivetran_account_name: acme corp, fivetran_group_name: lake_dest]"), obj


def test_requests_up_to_128_mib_are_accepted(server):
    """The SDK raises gRPC's limits to 128 MiB in both directions (gRPC's default receive limit is 4 MiB)."""
    big = "x" * (100 * 1024 * 1024)
    ch = grpc.insecure_channel(f"127.0.0.1:{server.port}", options=[("grpc.max_send_message_length", 256 * 1024 * 1024)])
    try:
        stub = pb_grpc.DestinationConnectorStub(ch)
        resp = stub.DescribeTable(pb.DescribeTableRequest(schema_name="s", table_name="missing", configuration={"pad": big}),
                                  timeout=120)
        assert resp.not_found
        too_big = "x" * (129 * 1024 * 1024)
        try:
            stub.DescribeTable(pb.DescribeTableRequest(schema_name="s", table_name="t", configuration={"pad": too_big}),
                               timeout=120)
            raise AssertionError("a request over 128 MiB was accepted")
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc.code()
    finally:
        ch.close()


def test_a_burst_of_signals_stops_the_server_cleanly(tmp_path, dedicated_server):
    """`make run` is stopped through its process group, so the destination can get several
    signals at once (and an operator may press Ctrl-C twice): none may wedge the shutdown."""
    import os
    import time

    srv = dedicated_server(tmp_path / "wh", tmp_path / "log")
    try:
        for i in range(300):
            os.kill(srv.proc.pid, signal.SIGINT if i % 2 else signal.SIGTERM)
        code = srv.proc.wait(60)
    finally:
        srv.stop()
    assert code == 0
    log = (tmp_path / "log").read_text()
    assert log.count("received signal") == 1 and "destination stopped" in log, log[-2000:]
