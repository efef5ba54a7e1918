"""A destination server subprocess, as Fivetran would launch it (shared by tests and bench)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import grpc

from delta_destination.engines.spark_process import free_loopback_port
from testkit.delta_read import storage_options_for

from delta_destination.doors.fivetran._proto import destination_sdk_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
# Third-party files the tests need, vendored so that a clone runs alone (each folder's PROVENANCE.md).
TESTDATA = ROOT / "testdata"
TESTER_INPUTS = TESTDATA / "fivetran-tester-inputs"
# The engines acceptance tests run against: both by default, e.g. DELTA_TEST_ENGINES=sail for a quick run.
TEST_ENGINES = tuple(e for e in os.environ.get("DELTA_TEST_ENGINES", "sail,spark").split(",") if e)


def free_port() -> int:
    return free_loopback_port()


def engine_flags(args) -> dict[str, str]:
    """The `--engine` and `--spark-remote` flags among a server's arguments, with their values."""
    args = list(args)
    return {a: args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--engine", "--spark-remote")}


class RunningServer:
    """A destination server subprocess, as Fivetran would launch it."""

    def __init__(self, warehouse: Path, log_path: Path, extra_args=(), env=None, command=None, engine: str | None = None,
                 ready_timeout: float | None = 180.0, launcher=None, cwd: Path = ROOT):
        """`command`: the program to start (default: this Python running the Fivetran door),
        e.g. a PyInstaller binary; `--port` and `--warehouse` are added. `engine`: adds `--engine`.
        `launcher`: port -> the whole command line instead (e.g. `make run PORT=...`); it runs in
        its own process group, which stop() signals as a whole. `ready_timeout=None`: return at once,
        without waiting for health SERVING (to act on a destination that is still starting). `cwd`:
        where it runs (`python -m` imports the package of that checkout first)."""
        self.port = free_port()
        if engine:
            extra_args = ("--engine", engine, *extra_args)
        # The engine flags it was started with, for commands that must reach the same engine (maintain).
        self.engine_args = tuple(x for flag in engine_flags(extra_args).items() for x in flag)
        self.warehouse = warehouse
        # How delta-rs reads this warehouse back, when it is on object storage (None: a directory).
        self.storage_options = storage_options_for(str(warehouse))
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.group = launcher is not None
        argv = launcher(self.port) if launcher else [
            *(command or [sys.executable, "-m", "delta_destination.doors.fivetran.main"]),
            "--port", str(self.port), "--warehouse", str(warehouse), *extra_args]
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=self.group,
        )
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{self.port}",
            options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)],
        )
        self.stub = destination_sdk_pb2_grpc.DestinationConnectorStub(self.channel)
        if ready_timeout is not None:
            try:
                self._wait_ready(ready_timeout)
            except BaseException:
                self.stop()  # nobody gets a handle on a server that never became ready: do not leave it running
                raise

    def _wait_ready(self, timeout):
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        health = health_pb2_grpc.HealthStub(self.channel)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log_text()[-3000:]}")
            try:
                r = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not become healthy: " + self.log_text()[-3000:])

    def log_text(self) -> str:
        self._log.flush()
        return Path(self.log_path).read_text(errors="replace")

    def stop(self, sig=None):
        import signal

        if self._log.closed:  # stopped already (fixtures stop what a test may have stopped itself)
            return
        if self.proc.poll() is None:
            if self.group:
                os.killpg(self.proc.pid, sig or signal.SIGTERM)
            else:
                self.proc.send_signal(sig or signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.channel.close()
        self._log.close()


def served(log_path, table_name: str) -> list[str]:
    """The engine part of a server's WriteBatch log lines for a table, in order."""
    import json

    out = []
    for line in log_path.read_text().splitlines():
        try:
            message = json.loads(line)["message"]
        except (ValueError, KeyError):
            continue
        if message.startswith("WriteBatch ") and f".{table_name}:" in message and "in one commit" in message:
            out.append("engine " + message.split(", engine ", 1)[1])
    return out
