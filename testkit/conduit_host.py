"""Plays Conduit's side of a standalone connector, without Go: starts the plugin the way
go-plugin does (clean environment + magic cookie + offered versions + CONDUIT_* variables),
reads the handshake line, opens go-plugin's broker stream, and drives the plugin over gRPC.
Also a schema service, as Conduit serves to its plugins, for Avro payloads.

Run as a program (`python -m testkit.conduit_host --work DIR ...`, which HostProcess starts) it is
a host PROCESS of its own -- the plugin's parent -- so that a test can kill -9 the host and watch the
orphan."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Optional

import grpc

from delta_destination.doors.conduit._proto import (connutils_schema_pb2, connutils_schema_pb2_grpc, destination_pb2,
                                              destination_pb2_grpc, grpc_controller_pb2, grpc_controller_pb2_grpc,
                                              opencdc_pb2, schema_pb2, specifier_pb2, specifier_pb2_grpc)
from delta_destination.doors.conduit.handshake import COOKIE_KEY, COOKIE_VALUE, parse

ROOT = Path(__file__).resolve().parents[1]
D = destination_pb2.Destination
TOKEN = "test-token-123"


def record(position, op: int, key=None, after=None, before=None, metadata=None) -> opencdc_pb2.Record:
    """An OpenCDC record; key/after/before: dict -> structured, bytes -> raw data."""
    r = opencdc_pb2.Record(position=str(position).encode() if not isinstance(position, bytes) else position,
                           operation=op, metadata=metadata or {})
    for target, value in ((r.key, key), (r.payload.after, after), (r.payload.before, before)):
        if value is None:
            continue
        if isinstance(value, bytes):
            target.raw_data = value
        else:
            target.structured_data.update(value)
    return r


CREATE, UPDATE, DELETE, SNAPSHOT = 1, 2, 3, 4


class SchemaRegistry(connutils_schema_pb2_grpc.SchemaServiceServicer):
    """Conduit's schema service: GetSchema with the connector token, on loopback."""

    def __init__(self):
        self.schemas: dict[tuple[str, int], bytes] = {}
        self.calls = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        connutils_schema_pb2_grpc.add_SchemaServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def add(self, subject: str, version: int, schema: dict) -> None:
        self.schemas[(subject, version)] = json.dumps(schema).encode()

    def GetSchema(self, request, context):
        self.calls += 1
        if dict(context.invocation_metadata()).get("conduit-connector-token") != TOKEN:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing token")
        data = self.schemas.get((request.subject, request.version))
        if data is None:
            context.abort(grpc.StatusCode.NOT_FOUND, "no such schema")
        return connutils_schema_pb2.GetSchemaResponse(schema=schema_pb2.Schema(
            subject=request.subject, version=request.version, type=schema_pb2.Schema.TYPE_AVRO, bytes=data))

    def stop(self):
        self.server.stop(0)


def numbered_records(first: int, count: int, keys: int, table_field: Optional[str] = None):
    """Records first..first+count-1 (positions "1", "2", ...): record i sets key k = i % keys to
    v = i, so a key's value says which record wrote it and the stream replayed is exact."""
    for i in range(first, first + count):
        k = i % keys
        yield record(i, CREATE if i <= keys else UPDATE, key={"k": k}, after={"k": k, "v": i})


class BrokerStream:
    """go-plugin's host side of `plugin.GRPCBroker/StartStream`: opened when the client is made,
    kept open while the host lives, closed by Kill() before Shutdown."""

    def __init__(self, channel):
        self._done = threading.Event()
        call = channel.stream_stream("/plugin.GRPCBroker/StartStream")
        self._call = call(self._requests())
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _requests(self):
        self._done.wait()
        return
        yield

    def _drain(self):
        try:
            for _ in self._call:
                pass
        except grpc.RpcError:
            pass

    def close(self):
        self._done.set()
        self._call.cancel()


class PluginProcess:
    def __init__(self, log_path: Path, schema_port: Optional[int] = None, extra_env=None, versions="1,2",
                 broker: bool = True, root: Path = ROOT):
        """`root`: the checkout whose connector runs (`python -m` imports from its working directory)."""
        env = {"PATH": os.environ.get("PATH", ""), COOKIE_KEY: COOKIE_VALUE, "PLUGIN_PROTOCOL_VERSIONS": versions,
               "PLUGIN_MIN_PORT": "10000", "PLUGIN_MAX_PORT": "25000",
               "CONDUIT_CONNECTOR_TOKEN": TOKEN, "CONDUIT_CONNECTOR_ID": "test:dst",
               "CONDUIT_CONNECTOR_LOG_LEVEL": "debug", "CONDUIT_CONNECTOR_MAX_RECEIVE_RECORD_SIZE": "4194304",
               "SPARK_CONNECT_MODE_ENABLED": "1"}
        if schema_port:
            env["CONDUIT_CONNECTOR_UTILITIES_GRPC_TARGET"] = f"[::]:{schema_port}"
        env.update(extra_env or {})
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "delta_destination.doors.conduit.main"], cwd=root,
                                     stdout=subprocess.PIPE, stderr=self._log, env=env)
        self.first_line = self.proc.stdout.readline().decode()
        self.handshake_seconds = time.monotonic() - self.started
        self.handshake = parse(self.first_line)
        self.channel = grpc.insecure_channel(self.handshake.address)
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.specifier = specifier_pb2_grpc.SpecifierPluginStub(self.channel)
        self.destination = destination_pb2_grpc.DestinationPluginStub(self.channel)
        self.controller = grpc_controller_pb2_grpc.GRPCControllerStub(self.channel)
        self.broker = BrokerStream(self.channel) if broker else None

    def specify(self):
        return self.specifier.Specify(specifier_pb2.Specifier.Specify.Request(), timeout=10).specification

    def configure(self, config: dict):
        return self.destination.Configure(D.Configure.Request(config=config), timeout=30)

    def open(self, config: dict):
        self.configure(config)
        self.destination.LifecycleOnCreated(D.Lifecycle.OnCreated.Request(config=config), timeout=30)
        self.destination.Open(D.Open.Request(), timeout=600)   # a local Spark JVM can take minutes on a busy machine
        return RunStream(self.destination)

    def stop(self, last_position: bytes):
        return self.destination.Stop(D.Stop.Request(last_position=last_position), timeout=400)

    def teardown(self):
        return self.destination.Teardown(D.Teardown.Request(), timeout=120)

    def kill_gracefully(self) -> float:
        """go-plugin's Kill(): Shutdown, then wait up to 2 s. Returns how long the exit took."""
        start = time.monotonic()
        if self.broker is not None:
            self.broker.close()               # go-plugin's GRPCClient.Close(): broker first, then Shutdown
        try:
            self.controller.Shutdown(grpc_controller_pb2.Empty(), timeout=5)
        except grpc.RpcError:
            pass  # the process may be gone before it answers
        try:
            self.proc.wait(10)
        finally:
            self.close()
        return time.monotonic() - start

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.close()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.channel.close()
        self._log.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


class RunStream:
    """The bidi Run stream: send records one per request (Conduit's default), collect acks.
    `sent` counts the requests gRPC has taken from us (flow control holds them back when the
    plugin does not read)."""

    def __init__(self, stub):
        self._out: "queue.Queue" = queue.Queue()
        self.acks: list = []
        self.sent = 0
        self._cond = threading.Condition()
        self.error: Optional[BaseException] = None
        self._call = stub.Run(self._requests())
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        try:
            for resp in self._call:
                with self._cond:
                    self.acks.extend(resp.acks)
                    self._cond.notify_all()
        except grpc.RpcError as exc:
            self.error = exc
        with self._cond:
            self._cond.notify_all()

    def _requests(self):
        while True:
            item = self._out.get()
            if item is None:
                return
            if isinstance(item, D.Run.Request):
                item = (item,)
            for req in item:                  # a lazy iterable of requests (a backlog) or one request
                self.sent += 1
                yield req

    def send(self, *records):
        for r in records:
            self._out.put(D.Run.Request(records=[r]))

    def send_lazily(self, records):
        """Queue an iterable of records to be produced only as fast as gRPC takes them."""
        self._out.put(D.Run.Request(records=[r]) for r in records)

    def cancel(self):
        """Conduit's stopStream(): cancel the call (as a host does when it gives up on it)."""
        self._call.cancel()

    def wait_acks(self, n: int, timeout: float = 120.0) -> list:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.acks) < n:
                left = deadline - time.monotonic()
                if left <= 0 or (self.error is not None):
                    break
                self._cond.wait(left)
            return list(self.acks)

    def close(self):
        self._out.put(None)
        self._thread.join(30)


# ---- a host process of its own ------------------------------------------------------------------
def _write_json(path: Path, value) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


def host_main(argv=None) -> int:
    """Start the plugin as this process's child, stream numbered records into it and report
    progress in WORK/host.json ({"plugin_pid", "acked", "errors", "last"}). With --finish it
    stops the plugin the way Conduit does once everything is acked; without it, it keeps the
    plugin running until this process is killed."""
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--config", required=True, help="connector settings as JSON")
    p.add_argument("--first", type=int, default=1)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--keys", type=int, required=True)
    p.add_argument("--name", default="host")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the plugin")
    p.add_argument("--finish", action="store_true")
    a = p.parse_args(argv)
    work = Path(a.work)
    status_path = work / f"{a.name}.json"
    extra = dict(e.split("=", 1) for e in a.env)
    plugin = PluginProcess(work / f"{a.name}-plugin.log", extra_env=extra)
    status = {"plugin_pid": plugin.proc.pid, "acked": 0, "errors": [], "last": None, "finished": False}
    _write_json(status_path, status)
    run = plugin.open(json.loads(a.config))
    run.send_lazily(numbered_records(a.first, a.count, a.keys))
    seen = 0
    while seen < a.count and run.error is None:
        acks = run.wait_acks(seen + 1, timeout=1.0)
        if len(acks) > seen:
            new = acks[seen:]
            seen = len(acks)
            status["acked"] = sum(1 for x in acks if not x.error)
            status["errors"] += [x.error for x in new if x.error][:5]
            status["last"] = new[-1].position.decode()
            _write_json(status_path, status)
    if a.finish:
        plugin.stop(str(a.first + a.count - 1).encode())
        run.close()
        plugin.teardown()
        plugin.kill_gracefully()
        status["finished"] = True
        _write_json(status_path, status)
        return 0
    threading.Event().wait()     # keep the plugin running until this host is killed
    return 0


class HostProcess:
    """This program (host_main) as a process of its own, the plugin's parent: kill -9 it and the
    plugin is an orphan, as after a kill -9 of Conduit."""

    def __init__(self, work: Path, name: str, config: dict, first: int, count: int, keys: int,
                 env: dict | None = None, finish: bool = False):
        self.status_path = work / f"{name}.json"
        self.status_path.unlink(missing_ok=True)
        args = [sys.executable, "-m", "testkit.conduit_host", "--work", str(work), "--name", name,
                "--config", json.dumps(config), "--first", str(first), "--count", str(count), "--keys", str(keys)]
        for k, v in (env or {}).items():
            args += ["--env", f"{k}={v}"]
        if finish:
            args.append("--finish")
        self._log = open(work / f"{name}-host.log", "ab")
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)
        self.plugin_pid = self.wait_for(lambda s: True, timeout=120)["plugin_pid"]

    def status(self) -> dict:
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return {}

    def wait_for(self, predicate, timeout: float = 180.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.status()
            if s and predicate(s):
                return s
            if self.proc.poll() is not None and not (s and predicate(s)):
                raise AssertionError(f"host exited ({self.proc.returncode}) before the condition: {s}")
            time.sleep(0.05)
        raise AssertionError(f"timeout waiting for the host: {self.status()}")

    def kill9(self) -> float:
        """kill -9 of the host; returns the wall-clock time (s) at which it was dead."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        return time.time()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


if __name__ == "__main__":
    sys.exit(host_main())
