"""Fivetran SDK messages <-> the core's model (tables, file params, migrations)."""
from __future__ import annotations

from datetime import datetime, timezone

from ...core import migrations as mig
from ...errors import InvalidRequest
from ...core.model import Column, DataType, TableSchema
from ._proto import common_pb2, destination_sdk_pb2 as pb
from .batch_files import Compression, Encryption, FileFormat, FileParams


def data_type(value: int) -> DataType:
    if value not in DataType._value2member_map_:
        raise InvalidRequest(f"unknown data type {value}")
    return DataType(value)


def table_from_proto(t: common_pb2.Table) -> TableSchema:
    if not t.name:
        raise InvalidRequest("the request has no table name")
    cols = []
    for c in t.columns:
        if c.type not in DataType._value2member_map_:
            raise InvalidRequest(f"column {c.name!r}: unknown data type {c.type}")
        precision = scale = sbl = None
        if c.HasField("params"):
            which = c.params.WhichOneof("params")
            if which == "decimal":
                precision, scale = c.params.decimal.precision, c.params.decimal.scale
            elif which == "string_byte_length":
                sbl = c.params.string_byte_length
        cols.append(Column(c.name, DataType(c.type), c.primary_key, precision, scale, sbl))
    return TableSchema(t.name, tuple(cols))


def table_to_proto(t: TableSchema) -> common_pb2.Table:
    out = common_pb2.Table(name=t.name)
    for c in t.columns:
        col = out.columns.add(name=c.name, type=int(c.type), primary_key=c.primary_key)
        if c.type == DataType.DECIMAL:
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


def _entity(msg, kind: str):
    which = msg.WhichOneof("entity")
    if which is None:
        raise InvalidRequest(f"the {kind} migration names no entity")
    return which, getattr(msg, which)


def _drop(d):
    e, m = _entity(d.drop, "drop")
    if e == "drop_table":
        if not m:
            raise InvalidRequest("drop_table is false: nothing to do")
        return mig.DropTable()
    return mig.DropColumnInHistoryMode(m.column, m.operation_timestamp)


def _copy(d):
    e, m = _entity(d.copy, "copy")
    if e == "copy_table":
        return mig.CopyTable(m.from_table, m.to_table)
    if e == "copy_column":
        return mig.CopyColumn(m.from_column, m.to_column)
    return mig.CopyTableToHistoryMode(m.from_table, m.to_table, m.soft_deleted_column or None)


def _rename(d):
    e, m = _entity(d.rename, "rename")
    if e == "rename_table":
        return mig.RenameTable(m.from_table, m.to_table)
    return mig.RenameColumn(m.from_column, m.to_column)


def _add(d):
    e, m = _entity(d.add, "add")
    if e == "add_column_with_default_value":
        return mig.AddColumnWithDefaultValue(m.column, data_type(m.column_type), m.default_value)
    return mig.AddColumnInHistoryMode(m.column, data_type(m.column_type), m.default_value, m.operation_timestamp)


def _update_column_value(d):
    return mig.UpdateColumnValue(d.update_column_value.column, d.update_column_value.value)


def _sync_mode(d):
    m = d.table_sync_mode_migration
    if m.type not in mig.SyncModeMigration._value2member_map_:
        raise InvalidRequest(f"unknown table sync mode migration {m.type}")
    return mig.TableSyncModeMigration(
        mig.SyncModeMigration(m.type),
        m.soft_deleted_column if m.HasField("soft_deleted_column") else None,
        m.keep_deleted_rows if m.HasField("keep_deleted_rows") else None,
    )


_OPERATIONS = {"drop": _drop, "copy": _copy, "rename": _rename, "add": _add,
               "update_column_value": _update_column_value, "table_sync_mode_migration": _sync_mode}


def migration_from_proto(d: pb.MigrationDetails) -> mig.MigrationDetails:
    convert = _OPERATIONS.get(d.WhichOneof("operation"))
    if convert is None:
        raise InvalidRequest("the migration request names no operation")
    return mig.MigrationDetails(d.schema, d.table, convert(d))
