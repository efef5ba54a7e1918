"""The process contract: flags, listening addresses, JSON logs, health, graceful SIGTERM."""
from __future__ import annotations

import json
import signal
import socket
import threading

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from batch_helpers import batch_file, write_request
from testkit.server_process import RunningServer
from testkit.delta_read import read_delta_table
from rpc_helpers import col, table
from delta_destination.fivetran._proto import destination_sdk_pb2 as pb


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


def test_sigterm_drains_in_flight_request(tmp_path):
    srv = RunningServer(tmp_path / "wh", tmp_path / "log")
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
