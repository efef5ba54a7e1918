"""The Conduit connector process.

Conduit starts it with no arguments (from a launcher in its connectors directory, see
`install`): it checks the go-plugin environment, serves gRPC on loopback, prints the handshake
as its FIRST stdout line, and serves until go-plugin's controller asks it to shut down.

    conduit-delta-connector install CONNECTORS_DIR   # writes the launcher Conduit runs
"""
from __future__ import annotations

import os
import shlex
import signal
import stat
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ... import logs
from ..process_exit import exit_now
from ._proto import destination_pb2_grpc, grpc_controller_pb2_grpc, specifier_pb2_grpc
from .errors import HandshakeError
from .handshake import Handshake, negotiate
from .liveness import HostWatch, die_with_parent
from .log_format import HclogJsonHandler, level_from
from .servicer import ControllerServicer, DestinationServicer, SpecifierServicer, broker_handler
from .spec import NAME

log = logs.get("delta_destination.doors.conduit.main")  # not __name__: this module also runs as __main__
MAX_MESSAGE = 2 ** 31 - 1      # Conduit may send records up to MaxInt32 bytes
WORKERS = 16                   # Run and its reader pin threads; Stop and Teardown must still get one
SHUTDOWN_GRACE = 1.0           # go-plugin SIGKILLs us 2 s after Shutdown: stay well inside it
HOST_GONE_EXIT = 5.0           # the host is gone: exit this long after, unless Shutdown comes first


def launcher_text(python: str) -> str:
    """A shell launcher for Conduit's connectors directory: absolute interpreter, exec (so
    go-plugin's SIGKILL reaches python itself), no output of its own."""
    return f"#!/bin/sh\nexec {shlex.quote(python)} -m delta_destination.doors.conduit.main \"$@\"\n"


def install(directory: str, name: str = NAME) -> Path:
    path = Path(directory) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(launcher_text(sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def make_core(cfg):
    """The core and its engine, started when a connector opens (not for Specify or a config check)."""
    from ..runtime import open_core

    runtime = open_core("conduit", cfg.runtime)
    _RUNTIMES.append(runtime)
    runtime.core.start_engines(cfg.settings)   # started now (or the Open fails): the first batch does not wait
    return runtime.core


_RUNTIMES: list = []


def serve(env: dict, host: HostWatch) -> int:
    version = negotiate(env)
    logs.install(HclogJsonHandler(sys.stderr), level_from(env.get("CONDUIT_CONNECTOR_LOG_LEVEL", "info")))
    shutdown = threading.Event()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="rpc"),
                         options=[("grpc.max_receive_message_length", MAX_MESSAGE),
                                  ("grpc.max_send_message_length", MAX_MESSAGE),
                                  # Backpressure: while the pipeline's buffer is full nothing reads the
                                  # Run stream, and HTTP/2's flow-control window is all Conduit can send
                                  # ahead. Without BDP probing that window stays at its 64 KiB default
                                  # instead of growing to megabytes of records held in this process.
                                  ("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1 << 20)])
    health_servicer = health.HealthServicer()
    health_servicer.set("plugin", health_pb2.HealthCheckResponse.SERVING)   # go-plugin's service name
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    specifier_pb2_grpc.add_SpecifierPluginServicer_to_server(SpecifierServicer(), server)
    destination_pb2_grpc.add_DestinationPluginServicer_to_server(DestinationServicer(env, make_core, host), server)
    grpc_controller_pb2_grpc.add_GRPCControllerServicer_to_server(ControllerServicer(shutdown.set), server)
    server.add_generic_rpc_handlers((broker_handler(host),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sys.stdout.write(Handshake(version, f"127.0.0.1:{port}").line() + "\n")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())   # nothing else may reach the handshake pipe
    log.info(f"serving connector protocol v{version} on 127.0.0.1:{port} ({env.get('CONDUIT_CONNECTOR_ID', '')})")
    gone_at: list[float] = []
    host.on_gone(lambda reason: gone_at.append(time.monotonic()))
    while not shutdown.wait(0.2):
        if gone_at and time.monotonic() - gone_at[0] >= HOST_GONE_EXIT:
            log.warning("the host is gone and did not shut the connector down: exiting")
            break
    log.info("shutting down")
    server.stop(0.2)
    def stop_all():
        for runtime in _RUNTIMES:
            runtime.close(lineage_timeout=1.0)

    stopper = threading.Thread(target=stop_all, daemon=True)
    stopper.start()
    stopper.join(SHUTDOWN_GRACE)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["install"] and len(argv) in (2, 3):
        print(install(*argv[1:]))
        return 0
    if argv:
        sys.stderr.write(__doc__ or "")
        return 2
    # Ctrl-C reaches the whole process group; Conduit stops its plugins itself (as Go plugins do).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    env = dict(os.environ)
    # No write without a live host: die with the parent (Conduit), from the first moment.
    parent = os.getppid()
    die_with_parent(env)
    host = HostWatch(parent)
    if not host.parent_alive():        # the parent died before the kernel was asked
        return 1
    host.start_watchdog()
    try:
        code = serve(env, host)
    except HandshakeError as exc:
        sys.stderr.write(f"{exc.message}\n")
        return 1
    exit_now(code)   # no interpreter teardown: the engine's threads must not delay go-plugin's Kill
    return code


if __name__ == "__main__":
    sys.exit(main())
