"""The gRPC servicer: each handler converts the request, calls the core and builds the
response. `rpc` is the ONE place where typed errors become gRPC statuses or Tasks."""
from __future__ import annotations

import functools
import os
import time

import grpc

from ... import logs, metrics
from ...core.api import DeltaCore
from ... import errors
from ..grpc_status import grpc_status
from ...core import notices
from ...core.migrations import UNSUPPORTED
from ...settings import Settings
from ._proto import common_pb2, destination_sdk_pb2 as pb, destination_sdk_pb2_grpc
from .batch_files import FileFormat
from .batches import BatchFiles
from .convert import file_params_from_proto, migration_from_proto, table_from_proto, table_to_proto, timestamp_to_datetime
from .setup_form import SETUP_TESTS, configuration_form, run_setup_test

log = logs.get(__name__)

def request_target(request) -> str:
    """' of table <schema>.<table>' for requests that name one (metadata, never values), else ''."""
    details = getattr(request, "details", None)
    if details is not None and hasattr(details, "schema"):
        schema, table = details.schema, details.table
    else:
        schema = getattr(request, "schema_name", "")
        table = getattr(request, "table_name", "") or getattr(getattr(request, "table", None), "name", "")
    if not (schema or table):
        return ""
    return f" of table {schema}.{table}"


def raised_at(exc: BaseException) -> str:
    """The innermost frame of this package that the exception passed: 'core/writer.py:185 (_apply)'."""
    where = "?"
    tb = exc.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
        if "/delta_destination/" in path:
            where = f"{path.rsplit('/delta_destination/', 1)[1]}:{tb.tb_lineno} ({tb.tb_frame.f_code.co_name})"
        tb = tb.tb_next
    return where


def still_wanted(context):
    """The commit guard of a write: a request its client cancelled (or whose deadline passed)
    commits nothing; Fivetran sends the batch again."""
    def guard() -> None:
        if not context.is_active():
            raise errors.RequesterGone("the request was cancelled by its client before its commit; nothing was written")
    return guard


def with_warnings(response, notes: list[str]):
    """A successful response becomes a Warning when the core left notices: the sync goes on
    and the customer sees them (a response holds exactly one of success, warning, task)."""
    if notes and "warning" in response.DESCRIPTOR.fields_by_name and response.WhichOneof("response") == "success":
        response.warning.message = " | ".join(notes)[:4000]
    return response


def rpc(response_cls):
    """Task for what the customer must fix, a gRPC status for every other typed error, a
    Warning for a success the customer should know more about."""

    def wrap(fn):
        name = fn.__name__

        @functools.wraps(fn)
        def inner(self, request, context):
            start = time.monotonic()
            outcome = "internal"
            try:
                with notices.collecting() as notes:
                    response = fn(self, request, context)
                response = with_warnings(response, notes)
                outcome = "warning" if notes else "success"
                return response
            except errors.CustomerActionRequired as exc:
                outcome = "task"
                log.warning(f"{name}{request_target(request)}: task for the customer: {exc.message}")
                return response_cls(task=common_pb2.Task(message=exc.message))
            except errors.DestinationError as exc:
                log.error(f"{name}{request_target(request)} failed: {exc.message}")
                message = exc.message
                if isinstance(exc, errors.EngineError):  # an operator reads these: which request, which table
                    message = f"{name}{request_target(request)} failed: {exc.message}"
                code = grpc_status(exc)
                outcome = code.name.lower()
                context.abort(code, message)
            except Exception as exc:  # noqa: BLE001 - last resort; never leak internals or values
                # The class and where it was raised (never its message: it may quote values).
                what = f"{name}{request_target(request)} failed with an unexpected {type(exc).__name__} in {raised_at(exc)}"
                log.error(what)
                context.abort(grpc.StatusCode.INTERNAL, what)
            finally:
                metrics.request_finished("fivetran", name, outcome)
                elapsed = time.monotonic() - start
                if elapsed >= logs.SLOW_SECONDS:
                    log.info(f"{name} took {elapsed:.1f}s")

        return inner

    return wrap


class DestinationServicer(destination_sdk_pb2_grpc.DestinationConnectorServicer):
    def __init__(self, settings: Settings, core: DeltaCore, file_format: FileFormat = FileFormat.CSV):
        self.settings = settings
        self.core = core
        self.file_format = file_format

    def _settings(self, request) -> Settings:
        return self.settings.resolve(dict(request.configuration))

    def _files(self, request, earliest_start=()) -> BatchFiles:
        return BatchFiles(file_params_from_proto(request.file_params, self.file_format), dict(request.keys),
                          list(request.replace_files), list(request.update_files), list(request.delete_files),
                          list(earliest_start))

    def ConfigurationForm(self, request, context):
        return configuration_form(self.settings)

    def Capabilities(self, request, context):
        fmt = pb.PARQUET if self.file_format == FileFormat.PARQUET else pb.CSV
        return pb.CapabilitiesResponse(batch_file_format=fmt)

    @rpc(common_pb2.TestResponse)
    def Test(self, request, context):
        if request.name not in SETUP_TESTS:
            raise errors.InvalidRequest(f"unknown test {request.name!r}")
        try:
            failure = run_setup_test(request.name, self._settings(request), self.core)
        except errors.DestinationError as exc:
            failure = exc.message
        if failure:
            log.warning(f"Test {request.name}: failed")
            return common_pb2.TestResponse(failure=failure)
        log.info(f"Test {request.name}: succeeded")
        return common_pb2.TestResponse(success=True)

    @rpc(pb.DescribeTableResponse)
    def DescribeTable(self, request, context):
        t = self.core.describe(self._settings(request), request.schema_name, request.table_name)
        if t is None:
            return pb.DescribeTableResponse(not_found=True)
        return pb.DescribeTableResponse(table=table_to_proto(t))

    @rpc(pb.CreateTableResponse)
    def CreateTable(self, request, context):
        self.core.tables.create(self._settings(request), request.schema_name, table_from_proto(request.table))
        return pb.CreateTableResponse(success=True)

    @rpc(pb.AlterTableResponse)
    def AlterTable(self, request, context):
        self.core.tables.alter(self._settings(request), request.schema_name, table_from_proto(request.table),
                               request.drop_columns)
        return pb.AlterTableResponse(success=True)

    @rpc(pb.TruncateResponse)
    def Truncate(self, request, context):
        if not request.table_name:
            raise errors.InvalidRequest("Truncate needs a table name")
        if request.HasField("soft") and not request.soft.deleted_column:
            raise errors.InvalidRequest("soft truncate needs a deleted_column")
        soft = request.soft.deleted_column if request.HasField("soft") else None
        self.core.tables.truncate(self._settings(request), request.schema_name, request.table_name,
                                  request.synced_column, timestamp_to_datetime(request.utc_delete_before), soft)
        return pb.TruncateResponse(success=True)

    @rpc(pb.WriteBatchResponse)
    def WriteBatch(self, request, context):
        table = table_from_proto(request.table).name
        files = self._files(request)
        self.core.writer.write(self._settings(request), request.schema_name, table, files.read,
                               guard=still_wanted(context))
        return pb.WriteBatchResponse(success=True)

    @rpc(pb.WriteBatchResponse)
    def WriteHistoryBatch(self, request, context):
        table = table_from_proto(request.table).name
        files = self._files(request, request.earliest_start_files)
        self.core.history.write(self._settings(request), request.schema_name, table, files.read,
                                guard=still_wanted(context))
        return pb.WriteBatchResponse(success=True)

    @rpc(pb.MigrateResponse)
    def Migrate(self, request, context):
        result = self.core.migrate(self._settings(request), migration_from_proto(request.details))
        if result == UNSUPPORTED:
            return pb.MigrateResponse(unsupported=True)
        return pb.MigrateResponse(success=True)
