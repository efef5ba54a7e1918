"""The gRPC servicer: a thin protocol layer.

It converts messages to the model, calls the engine, and is the ONE place where
typed errors become gRPC statuses or Task responses.
"""
from __future__ import annotations

import functools
import time
from datetime import datetime, timezone

import grpc

from . import log
from ._proto import common_pb2, destination_sdk_pb2 as pb, destination_sdk_pb2_grpc
from .batch_reader import Compression, Encryption, FileFormat, FileParams
from .config import Settings
from .engine.batch_merge import BatchMerger, BatchRequest
from .engine.history_merge import HistoryMerger, HistoryRequest
from .engine import migrations as mig
from .engine.tables import TableEngine
from .errors import CustomerActionRequired, DestinationError, InvalidRequest
from .model import Column, FivetranType, TableSchema
from .setup_tests import SETUP_TESTS, run_setup_test, configuration_form


def table_from_proto(t: common_pb2.Table) -> TableSchema:
    if not t.name:
        raise InvalidRequest("the request has no table name")
    cols = []
    for c in t.columns:
        if c.type not in FivetranType._value2member_map_:
            raise InvalidRequest(f"column {c.name!r}: unknown data type {c.type}")
        precision = scale = sbl = None
        if c.HasField("params"):
            which = c.params.WhichOneof("params")
            if which == "decimal":
                precision, scale = c.params.decimal.precision, c.params.decimal.scale
            elif which == "string_byte_length":
                sbl = c.params.string_byte_length
        cols.append(Column(c.name, FivetranType(c.type), c.primary_key, precision, scale, sbl))
    return TableSchema(t.name, tuple(cols))


def table_to_proto(t: TableSchema) -> common_pb2.Table:
    out = common_pb2.Table(name=t.name)
    for c in t.columns:
        col = out.columns.add(name=c.name, type=int(c.type), primary_key=c.primary_key)
        if c.type == FivetranType.DECIMAL:
            p, s = c.decimal_params()
            col.params.decimal.precision = p
            col.params.decimal.scale = s
        elif c.string_byte_length is not None:
            col.params.string_byte_length = c.string_byte_length
    return out


def file_params_from_proto(fp: pb.FileParams, file_format: FileFormat) -> FileParams:
    if fp.compression not in Compression._value2member_map_:
        raise InvalidRequest(f"unknown compression {fp.compression}")
    if fp.encryption not in Encryption._value2member_map_:
        raise InvalidRequest(f"unknown encryption {fp.encryption}")
    return FileParams(
        compression=Compression(fp.compression),
        encryption=Encryption(fp.encryption),
        null_string=fp.null_string,
        unmodified_string=fp.unmodified_string,
        file_format=file_format,
    )


def timestamp_to_datetime(ts) -> datetime:
    return datetime.fromtimestamp(ts.seconds, tz=timezone.utc).replace(microsecond=(ts.nanos // 1000))


def rpc(response_cls):
    """Map typed errors: Task for what the customer must fix, a gRPC status for everything else."""

    def wrap(fn):
        name = fn.__name__

        @functools.wraps(fn)
        def inner(self, request, context):
            start = time.monotonic()
            try:
                return fn(self, request, context)
            except CustomerActionRequired as exc:
                log.warning(f"{name}: task for the customer: {exc.message}")
                return response_cls(task=common_pb2.Task(message=exc.message))
            except DestinationError as exc:
                log.severe(f"{name} failed: {exc.message}")
                context.abort(exc.status, exc.message)
            except Exception as exc:  # noqa: BLE001 - last resort; never leak internals or values
                log.severe(f"{name} failed with an unexpected {type(exc).__name__}")
                context.abort(grpc.StatusCode.INTERNAL, f"{name} failed: unexpected {type(exc).__name__}")
            finally:
                elapsed = time.monotonic() - start
                if elapsed >= log.SLOW_SECONDS:
                    log.info(f"{name} took {elapsed:.1f}s")

        return inner

    return wrap


class DestinationServicer(destination_sdk_pb2_grpc.DestinationConnectorServicer):
    def __init__(self, settings: Settings, tables: TableEngine, file_format: FileFormat = FileFormat.CSV):
        self.settings = settings
        self.tables = tables
        self.merger = BatchMerger(tables)
        self.history = HistoryMerger(tables)
        self.migrator = mig.Migrator(tables)
        self.file_format = file_format

    def _settings(self, request) -> Settings:
        return self.settings.resolve(dict(request.configuration))

    def ConfigurationForm(self, request, context):
        return configuration_form(self.settings)

    def Capabilities(self, request, context):
        fmt = pb.PARQUET if self.file_format == FileFormat.PARQUET else pb.CSV
        return pb.CapabilitiesResponse(batch_file_format=fmt)

    @rpc(common_pb2.TestResponse)
    def Test(self, request, context):
        if request.name not in SETUP_TESTS:
            raise InvalidRequest(f"unknown test {request.name!r}")
        try:
            settings = self._settings(request)
            failure = run_setup_test(request.name, settings, self.tables)
        except DestinationError as exc:
            failure = exc.message
        if failure:
            log.warning(f"Test {request.name}: failed")
            return common_pb2.TestResponse(failure=failure)
        log.info(f"Test {request.name}: succeeded")
        return common_pb2.TestResponse(success=True)

    @rpc(pb.DescribeTableResponse)
    def DescribeTable(self, request, context):
        t = self.tables.describe(self._settings(request), request.schema_name, request.table_name)
        if t is None:
            return pb.DescribeTableResponse(not_found=True)
        return pb.DescribeTableResponse(table=table_to_proto(t))

    @rpc(pb.CreateTableResponse)
    def CreateTable(self, request, context):
        self.tables.create(self._settings(request), request.schema_name, table_from_proto(request.table))
        return pb.CreateTableResponse(success=True)

    @rpc(pb.AlterTableResponse)
    def AlterTable(self, request, context):
        self.tables.alter(self._settings(request), request.schema_name, table_from_proto(request.table), request.drop_columns)
        return pb.AlterTableResponse(success=True)

    @rpc(pb.TruncateResponse)
    def Truncate(self, request, context):
        if not request.table_name:
            raise InvalidRequest("Truncate needs a table name")
        soft = request.soft.deleted_column if request.HasField("soft") else None
        if request.HasField("soft") and not soft:
            raise InvalidRequest("soft truncate needs a deleted_column")
        self.tables.truncate(
            self._settings(request),
            request.schema_name,
            request.table_name,
            request.synced_column,
            timestamp_to_datetime(request.utc_delete_before),
            soft,
        )
        return pb.TruncateResponse(success=True)

    def _batch_fields(self, request) -> dict:
        """Fields WriteBatch and WriteHistoryBatch requests share."""
        return dict(
            schema=request.schema_name,
            table=table_from_proto(request.table).name,
            replace_files=list(request.replace_files),
            update_files=list(request.update_files),
            delete_files=list(request.delete_files),
            keys=dict(request.keys),
            params=file_params_from_proto(request.file_params, self.file_format),
        )

    @rpc(pb.WriteBatchResponse)
    def WriteBatch(self, request, context):
        self.merger.write_batch(self._settings(request), BatchRequest(**self._batch_fields(request)))
        return pb.WriteBatchResponse(success=True)

    @rpc(pb.WriteBatchResponse)
    def WriteHistoryBatch(self, request, context):
        req = HistoryRequest(earliest_start_files=list(request.earliest_start_files), **self._batch_fields(request))
        self.history.write_history_batch(self._settings(request), req)
        return pb.WriteBatchResponse(success=True)

    @rpc(pb.MigrateResponse)
    def Migrate(self, request, context):
        d = request.details

        def dtype(v):
            if v not in FivetranType._value2member_map_:
                raise InvalidRequest(f"unknown data type {v}")
            return FivetranType(v)

        def entity(msg, kind):
            which = msg.WhichOneof("entity")
            if which is None:
                raise InvalidRequest(f"the {kind} migration names no entity")
            return which, getattr(msg, which)

        which, op = d.WhichOneof("operation"), None
        if which == "drop":
            e, m = entity(d.drop, which)
            if e == "drop_table":
                if not m:
                    raise InvalidRequest("drop_table is false: nothing to do")
                op = mig.DropTable()
            else:
                op = mig.DropColumnInHistoryMode(m.column, m.operation_timestamp)
        elif which == "copy":
            e, m = entity(d.copy, which)
            if e == "copy_table":
                op = mig.CopyTable(m.from_table, m.to_table)
            elif e == "copy_column":
                op = mig.CopyColumn(m.from_column, m.to_column)
            else:
                op = mig.CopyTableToHistoryMode(m.from_table, m.to_table, m.soft_deleted_column or None)
        elif which == "rename":
            e, m = entity(d.rename, which)
            op = mig.RenameTable(m.from_table, m.to_table) if e == "rename_table" else mig.RenameColumn(m.from_column, m.to_column)
        elif which == "add":
            e, m = entity(d.add, which)
            if e == "add_column_with_default_value":
                op = mig.AddColumnWithDefaultValue(m.column, dtype(m.column_type), m.default_value)
            else:
                op = mig.AddColumnInHistoryMode(m.column, dtype(m.column_type), m.default_value, m.operation_timestamp)
        elif which == "update_column_value":
            op = mig.UpdateColumnValue(d.update_column_value.column, d.update_column_value.value)
        elif which == "table_sync_mode_migration":
            m = d.table_sync_mode_migration
            if m.type not in mig.SyncModeMigration._value2member_map_:
                raise InvalidRequest(f"unknown table sync mode migration {m.type}")
            op = mig.TableSyncModeMigration(
                mig.SyncModeMigration(m.type),
                m.soft_deleted_column if m.HasField("soft_deleted_column") else None,
                m.keep_deleted_rows if m.HasField("keep_deleted_rows") else None,
            )
        else:
            raise InvalidRequest("the migration request names no operation")
        result = self.migrator.migrate(self._settings(request), mig.MigrationDetails(d.schema, d.table, op))
        if result == mig.UNSUPPORTED:
            return pb.MigrateResponse(unsupported=True)
        return pb.MigrateResponse(success=True)
