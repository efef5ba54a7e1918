"""The Fivetran door's process: `fivetran-delta-destination --port 50052 --warehouse ./warehouse`."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ... import logs
from ..runtime import open_core
from ...errors import DestinationError
from ..process_exit import exit_now
from ...core.api import DeltaCore
from ...core.upkeep import PeriodicUpkeep, UpkeepOptions
from ...settings import PROCESS, RUNTIME_FIELDS, Settings, add_flags, from_flags, runtime_from_values
from ._proto import destination_sdk_pb2_grpc
from .batch_files import FileFormat
from .log_format import FivetranJsonHandler
from .servicer import DestinationServicer

GRACE_SECONDS = 60
MAX_MESSAGE_BYTES = 128 * 1024 * 1024  # the SDK's limit, in both directions
HEALTH_INTERVAL = float(os.environ.get("FIVETRAN_DELTA_HEALTH_INTERVAL", "15"))  # seconds between engine checks
log = logs.get("delta_destination.doors.fivetran.main")  # not __name__: this module also runs as __main__


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="fivetran-delta-destination", description=__doc__)
    p.add_argument("--port", type=int, default=50052)
    add_flags(p, PROCESS)  # the settings schema: --warehouse, --engine, --spark-remote, storage, catalog, upkeep
    p.add_argument("--batch-file-format", choices=["csv", "parquet"], default="csv", help="format answered in Capabilities")
    p.add_argument("--workers", type=int, default=8, help="concurrent requests")
    return p.parse_args(argv)


def _bind(server: grpc.Server, port: int) -> None:
    """IPv6 and IPv4 (SDK rule); IPv4 alone when IPv6 is unavailable."""
    bound = []
    for addr in (f"[::]:{port}", f"0.0.0.0:{port}"):
        try:
            if server.add_insecure_port(addr):
                bound.append(addr)
        except RuntimeError:
            pass
    if not bound:
        raise SystemExit(f"cannot listen on port {port}")
    log.info(f"listening on {', '.join(bound)}")


class EngineHealth:
    """The engine's state as gRPC health, with a log line whenever it changes: an operator
    must see when the destination became ready even when the engine came up only on a
    later try, and when (and for how long) it stopped answering."""

    def __init__(self, servicer: health.HealthServicer, settings: Settings):
        self._servicer = servicer
        self._settings = settings
        self._serving: bool | None = None

    def set(self, serving: bool) -> None:
        if serving == self._serving:
            return
        self._servicer.set("", health_pb2.HealthCheckResponse.SERVING if serving
                           else health_pb2.HealthCheckResponse.NOT_SERVING)
        if serving:
            log.info(f"destination ready: warehouse {self._settings.warehouse}, engine {self._settings.engine_label}")
        elif self._serving is not None:
            log.warning(f"engine {self._settings.engine_label} does not answer: health NOT_SERVING until it does")
        self._serving = serving


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["maintain"]:   # the same as the delta-destination-maintain command
        from ..maintain import main as maintain

        return maintain(argv[1:])
    args = parse_args(argv)
    logs.install(FivetranJsonHandler())
    # Before anything is started: a SIGTERM that arrives while the engine starts, or just
    # after health turned SERVING, must still stop the engine and remove its scratch folder
    # (Python's default would end the process on the spot). The handler takes no lock and
    # logs nothing: a second signal (`make run` gets one per process of its group) can come
    # while the first handler runs, and re-entering Event.set() there deadlocks.
    signals: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: signals.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: signals.append(signum))
    try:
        settings = from_flags(args)
        options = runtime_from_values({f.key: getattr(args, f.key) for f in RUNTIME_FIELDS})
        DeltaCore.check_warehouse(settings)
        upkeep_options = UpkeepOptions(retention_hours=int(args.vacuum_retention_hours))
    except DestinationError as exc:
        raise SystemExit(f"fivetran-delta-destination: {exc.message}") from None
    runtime = open_core("fivetran", options)
    core = runtime.core
    notice = core.engine_notice(settings)
    if notice:
        log.warning(notice)
    try:
        removed = core.clean_leftovers(settings)
        if removed:
            log.info(f"removed {removed} leftover(s) of stopped destination processes from the warehouse")
    except OSError as exc:  # an unreachable store is reported by the setup tests; start anyway
        log.warning(f"could not look for leftovers in the warehouse ({type(exc).__name__})")

    health_servicer = health.HealthServicer()
    health_servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=args.workers, thread_name_prefix="rpc"),
        options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                 ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)],
    )
    fmt = FileFormat.PARQUET if args.batch_file_format == "parquet" else FileFormat.CSV
    destination_sdk_pb2_grpc.add_DestinationConnectorServicer_to_server(DestinationServicer(settings, core, fmt), server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    _bind(server, args.port)
    server.start()

    # Start the engine before declaring ourselves healthy. The start runs beside this thread,
    # which keeps watching for signals: a SIGTERM while a JVM starts under load stops the
    # destination at once (EnginePool.stop cancels the start) instead of after the start.
    published = EngineHealth(health_servicer, settings)

    def start_engine():
        try:
            core.start_engines(settings)
            if not signals:
                core.warm_up_engines(settings)   # a configured local Spark engine, while the destination serves
            if not signals:
                published.set(True)
        except Exception as exc:  # noqa: BLE001
            if signals:
                return  # stopping: the start was cancelled
            reason = exc.message if isinstance(exc, DestinationError) else type(exc).__name__
            log.error(f"the engine did not start ({reason}); will keep trying every {HEALTH_INTERVAL:.0f}s")

    starter = threading.Thread(target=start_engine, name="engine-start", daemon=True)
    starter.start()
    while starter.is_alive() and not signals:
        starter.join(0.2)

    stop = threading.Event()

    def watch_health():
        while not stop.wait(HEALTH_INTERVAL):
            ok = core.engines_healthy(settings)
            published.set(ok)
            if not ok:
                core.engines_answer(settings)  # restarts a local engine that died; the next round reports it

    threading.Thread(target=watch_health, name="health", daemon=True).start()
    periodic = PeriodicUpkeep(core.upkeep, settings, args.upkeep_interval_hours, upkeep_options,
                                  idle_minutes=args.upkeep_idle_minutes).start() \
        if args.upkeep_interval_hours > 0 else None

    while not signals:
        time.sleep(0.2)  # handlers run in this thread, between sleeps
    log.info(f"received signal {signals[0]}: draining in-flight requests")
    stop.set()
    health_servicer.enter_graceful_shutdown()
    if periodic is not None:
        periodic.stop()
    server.stop(GRACE_SECONDS).wait()
    runtime.close()
    starter.join(30)  # a cancelled start stops its JVM and removes its scratch folder
    log.info("destination stopped")
    exit_now(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
