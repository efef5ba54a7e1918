"""The gRPC services Conduit calls: Specifier, Destination (protocol v2) and go-plugin's
controller. Handlers are short; `rpc` is the ONE place where typed errors become gRPC statuses,
and `nack_message` the one place where they become nack text."""
from __future__ import annotations

import functools
import json
import os
import queue
import threading
import time
from typing import Callable, Optional

import grpc

from ... import logs, metrics
from ... import errors
from ..grpc_status import grpc_status
from ._proto import destination_pb2 as dpb, destination_pb2_grpc, grpc_controller_pb2, grpc_controller_pb2_grpc
from ._proto import specifier_pb2_grpc
from .errors import InvalidConfig
from .liveness import HostWatch
from .opencdc import decode
from .params import ConnectorConfig, parse_config
from .pipeline import Ack, Pipeline
from .spec import specification

log = logs.get(__name__)

STOP_WAIT_FOR_RECORD = 60.0     # as the Go SDK: Stop waits up to a minute for the last record ...
STOP_WAIT_FOR_FLUSH = 300.0     # ... and then for its commit (engine retries included)
PROGRESS_ENV = "CONDUIT_DELTA_PROGRESS_FILE"   # optional: a file that holds the count of acked records

def nack_message(exc: BaseException) -> str:
    if isinstance(exc, errors.DestinationError):
        return exc.message
    return f"unexpected {type(exc).__name__}; nothing of this record was written"


def rpc(fn):
    name = fn.__name__

    @functools.wraps(fn)
    def inner(self, request, context):
        outcome = "internal"
        try:
            response = fn(self, request, context)
            outcome = "success"
            return response
        except errors.DestinationError as exc:
            log.error(f"{name} failed: {exc.message}")
            code = grpc_status(exc)
            outcome = code.name.lower()
            context.abort(code, exc.message)
        except Exception as exc:  # noqa: BLE001 - never leak internals or values
            log.error(f"{name} failed with an unexpected {type(exc).__name__}")
            context.abort(grpc.StatusCode.INTERNAL, f"{name} failed: unexpected {type(exc).__name__}")
        finally:
            metrics.request_finished("conduit", name, outcome)

    return inner


class SpecifierServicer(specifier_pb2_grpc.SpecifierPluginServicer):
    def Specify(self, request, context):
        from ._proto import specifier_pb2

        return specifier_pb2.Specifier.Specify.Response(specification=specification())


class DestinationServicer(destination_pb2_grpc.DestinationPluginServicer):
    """One connector instance per process (Conduit starts a process per connector run)."""

    def __init__(self, env: dict, core_factory: Callable, host: HostWatch):
        self.env = env
        self.core_factory = core_factory      # ConnectorConfig -> DeltaCore; imports the engine lazily
        self.host = host
        self.cfg: Optional[ConnectorConfig] = None
        self.core = None
        self.pipeline: Optional[Pipeline] = None
        self.schemas = None
        self.stop_called = threading.Event()    # Stop came: the stream's end after it is the normal one
        self.torn_down = threading.Event()
        self._lock = threading.Lock()

    @rpc
    def Configure(self, request, context):
        self.cfg = parse_config(dict(request.config))
        log.info(f"configured: schema {self.cfg.schema}, engine {self.cfg.settings.engine_label}, "
                 f"batch size {self.cfg.batch_size}, delay {self.cfg.batch_delay}s")
        return dpb.Destination.Configure.Response()

    @rpc
    def Open(self, request, context):
        if self.cfg is None:
            raise InvalidConfig("Open before Configure")
        from .schemas import SchemaService, TARGET_ENV, TOKEN_ENV
        from .tables import BatchWriter

        self.core = self.core_factory(self.cfg)
        target = self.env.get(TARGET_ENV)
        self.schemas = SchemaService(target, self.env.get(TOKEN_ENV, "")) if target else None
        epochs = make_epochs(self.core, self.cfg, self.env.get("CONDUIT_CONNECTOR_ID", ""))
        writer = BatchWriter(self.core, self.cfg, epochs, self.host.alive, self.env)
        cfg, schemas = self.cfg, self.schemas

        def process(records) -> list[Ack]:
            decoded, errors = [], []
            for n, rec in enumerate(records):
                try:
                    decoded.append(decode(rec, cfg, schemas, f"record {n + 1} of the batch ({_op_name(rec)})"))
                    errors.append(None)
                except Exception as exc:  # noqa: BLE001 - the record is nacked with the reason
                    decoded.append(None)
                    errors.append(exc)
            ok = [d for d in decoded if d is not None]
            written = iter(writer.write(ok)) if ok else iter(())
            acks = []
            for rec, d, err in zip(records, decoded, errors):
                if d is not None:
                    err = next(written)
                acks.append(Ack(bytes(rec.position), nack_message(err) if err is not None else ""))
            bad = sum(1 for a in acks if a.error)
            metrics.request_finished("conduit", "batch", "nack" if bad else "success")
            if bad:
                log.error(f"batch of {len(acks)} records: {bad} nacked (first: {next(a.error for a in acks if a.error)})")
            return acks

        self.pipeline = Pipeline(process, cfg.batch_size, cfg.batch_delay, cfg.buffer_records, cfg.buffer_bytes,
                                 on_acked=_progress_writer(self.env))
        pipeline = self.pipeline
        self.host.on_gone(lambda reason: self._abandon(pipeline))
        log.info(f"opened (buffer: {cfg.buffer_records} records, {cfg.buffer_bytes} bytes)")
        return dpb.Destination.Open.Response()

    @staticmethod
    def _abandon(pipeline: Pipeline) -> None:
        dropped = pipeline.abandon()
        if dropped:
            log.warning(f"{dropped} buffered records dropped unacked (Conduit sends them again)")

    def _stream_ended(self, how: str) -> None:
        """The Run stream is over. After Stop that is Conduit's normal order (Stop, acks, cancel,
        Teardown); without Stop the host is gone or gave up on this connector."""
        if not self.stop_called.is_set() and not self.torn_down.is_set():
            self.host.mark_gone(f"the Run stream {how} without Stop")

    def Run(self, request_iterator, context):
        pipeline = self.pipeline
        if pipeline is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "Run before Open")
        ended = threading.Event()
        self.host.watch_stream(context.is_active)
        context.add_callback(lambda: self._stream_ended("was cancelled"))

        def read():
            how = "ended"
            try:
                for req in request_iterator:
                    if not pipeline.receive(list(req.records)):
                        how = ""       # the pipeline was closed (host gone or Teardown): stop reading
                        break
            except Exception as exc:  # noqa: BLE001 - the stream was cancelled
                how = "was cancelled"
                log.debug(f"Run stream closed ({type(exc).__name__})")
            finally:
                ended.set()
                if how:
                    self._stream_ended(how)

        threading.Thread(target=read, name="conduit-run-reader", daemon=True).start()
        while True:
            try:
                acks = pipeline.acks.get(timeout=0.2)
            except queue.Empty:
                # idle() before empty(): a batch's acks are queued before it counts as done
                if not context.is_active() or self.host.gone.is_set() or \
                        (ended.is_set() and pipeline.idle() and pipeline.acks.empty()):
                    return
                continue
            if acks is None:
                return
            yield dpb.Destination.Run.Response(
                acks=[dpb.Destination.Run.Response.Ack(position=a.position, error=a.error) for a in acks])

    @rpc
    def Stop(self, request, context):
        self.stop_called.set()
        if self.pipeline is None:
            return dpb.Destination.Stop.Response()
        last = bytes(request.last_position)
        start = time.monotonic()
        if not self.pipeline.flush_through(last, STOP_WAIT_FOR_RECORD, STOP_WAIT_FOR_FLUSH):
            raise errors.EngineError("Stop: the last record did not arrive or could not be written in time")
        log.info(f"stopped: everything up to the last position is written and acked ({time.monotonic() - start:.1f}s)")
        return dpb.Destination.Stop.Response()

    @rpc
    def Teardown(self, request, context):
        self.torn_down.set()
        self.host.expect_end()
        if self.pipeline is not None:
            dropped = self.pipeline.close()
            if dropped:
                log.warning(f"teardown: {dropped} records were never written nor acked; Conduit sends them again")
            pl = self.pipeline
            log.info(f"buffer peak: {pl.peak_records} records, {pl.peak_bytes} bytes "
                     f"(limits {pl.max_records} records, {pl.max_bytes} bytes)")
        if self.schemas is not None:
            self.schemas.close()
        log.info("torn down")
        return dpb.Destination.Teardown.Response()

    # Tables hold the customer's data: creating or deleting a connector never drops them.
    def LifecycleOnCreated(self, request, context):
        return dpb.Destination.Lifecycle.OnCreated.Response()

    def LifecycleOnUpdated(self, request, context):
        return dpb.Destination.Lifecycle.OnUpdated.Response()

    def LifecycleOnDeleted(self, request, context):
        return dpb.Destination.Lifecycle.OnDeleted.Response()


def make_epochs(core, cfg: ConnectorConfig, connector_id: str):
    """Writer epochs of this instance (see epochs.py): the core keeps each table's token current
    from its log (without the table's lock: the guard runs while the core's writer holds it);
    claimed through the core."""
    from .epochs import Epochs, epoch_key

    key = epoch_key(connector_id)
    settings, schema = cfg.settings, cfg.schema
    watches: dict = {}

    def current(table: str):
        watch = watches.get(table)
        if watch is None:
            watch = watches[table] = core.tables.watch_property(settings, schema, table, key)
        return watch.current()

    def set_value(table: str, value: str) -> None:
        core.tables.set_property(settings, schema, table, key, value)

    return Epochs(connector_id, current, set_value)


def broker_handler(host: HostWatch) -> grpc.GenericRpcHandler:
    """go-plugin's broker stream (`plugin.GRPCBroker/StartStream`): every go-plugin host opens
    it to its plugin and keeps it open while it lives; its end means the host is gone. The
    messages (ConnInfo, for sub-plugins) are never needed here, so they stay raw bytes."""

    def start_stream(request_iterator, context):
        try:
            for _ in request_iterator:
                pass
        except Exception:  # noqa: BLE001 - cancelled or broken: the same for us
            pass
        host.mark_gone("go-plugin's broker stream ended")
        return
        yield  # a generator: the response stream stays open while the host's side is

    return grpc.method_handlers_generic_handler(
        "plugin.GRPCBroker", {"StartStream": grpc.stream_stream_rpc_method_handler(start_stream)})


def _op_name(rec) -> str:
    return {1: "create", 2: "update", 3: "delete", 4: "snapshot"}.get(int(rec.operation), "unknown operation")


def _progress_writer(env: dict):
    path = env.get(PROGRESS_ENV)
    if not path:
        return None

    def write(count: int) -> None:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump({"acked": count}, f)
        os.replace(tmp, path)

    return write


class ControllerServicer(grpc_controller_pb2_grpc.GRPCControllerServicer):
    """go-plugin's Kill(): Shutdown, then SIGKILL after 2 s. We exit at once."""

    def __init__(self, on_shutdown: Callable[[], None]):
        self.on_shutdown = on_shutdown

    def Shutdown(self, request, context):
        self.on_shutdown()
        return grpc_controller_pb2.Empty()
