"""The benchmark's calls to the destination, as Fivetran makes them; every call carries its step's
label as `bench-label` gRPC metadata (bench/growth/profile_server.py names its profiles by it)."""
from __future__ import annotations

from typing import Optional

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from . import data as bd
from delta_destination.core.model import TableSchema
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.convert import table_to_proto

SCHEMA = "bench"
RPC_TIMEOUT = 4 * 3600


class RpcFailed(Exception):
    def __init__(self, message: str, code: Optional[str] = None):
        super().__init__(message)
        self.code = code  # the gRPC status name when the call itself failed (RESOURCE_EXHAUSTED = refused by the guard)


def file_params() -> pb.FileParams:
    return pb.FileParams(compression=int(bd.PARAMS.compression), encryption=int(bd.PARAMS.encryption),
                         null_string=bd.NULL_STRING, unmodified_string=bd.UNMOD_STRING)


def _check(resp, what: str) -> None:
    if resp.HasField("task"):
        raise RpcFailed(f"{what}: task: {resp.task.message}")
    if resp.HasField("warning"):
        print(f"    warning from {what}: {resp.warning.message}", flush=True)
    if not getattr(resp, "success", False):
        raise RpcFailed(f"{what}: response without success: {resp}")


def _call(fn, req, what: str, label: str):
    try:
        resp = fn(req, timeout=RPC_TIMEOUT, metadata=(("bench-label", label),))
    except grpc.RpcError as e:
        raise RpcFailed(f"{what}: gRPC {e.code().name}: {e.details()}", code=e.code().name) from None
    _check(resp, what)
    return resp


def write_batch(stub, table: TableSchema, *, replace=(), update=(), delete=(), label="WriteBatch") -> None:
    """WriteBatch with these files (data.FileSpec); RpcFailed unless it succeeds."""
    req = pb.WriteBatchRequest(
        schema_name=SCHEMA, table=table_to_proto(table),
        keys={f.path: f.key_bytes() for f in (*replace, *update, *delete)},
        replace_files=[f.path for f in replace], update_files=[f.path for f in update],
        delete_files=[f.path for f in delete], file_params=file_params())
    _call(stub.WriteBatch, req, f"WriteBatch {table.name}", label)


def write_history_batch(stub, table: TableSchema, *, earliest=(), replace=(), label="WriteHistoryBatch") -> None:
    req = pb.WriteHistoryBatchRequest(
        schema_name=SCHEMA, table=table_to_proto(table),
        keys={f.path: f.key_bytes() for f in (*earliest, *replace)},
        earliest_start_files=[f.path for f in earliest], replace_files=[f.path for f in replace],
        file_params=file_params())
    _call(stub.WriteHistoryBatch, req, f"WriteHistoryBatch {table.name}", label)


def create_table(stub, table: TableSchema) -> None:
    _call(stub.CreateTable, pb.CreateTableRequest(schema_name=SCHEMA, table=table_to_proto(table)),
          f"CreateTable {table.name}", "CreateTable")


def describe_table(stub, table: TableSchema) -> None:
    """DescribeTable, answer unchecked: a new server's first request reads the table's metadata."""
    stub.DescribeTable(pb.DescribeTableRequest(schema_name=SCHEMA, table_name=table.name), timeout=600)


def soft_truncate(stub, table: TableSchema, before_ms: int, label="Truncate") -> None:
    ts = Timestamp()
    ts.FromMilliseconds(before_ms)
    req = pb.TruncateRequest(schema_name=SCHEMA, table_name=table.name, synced_column="_fivetran_synced",
                             utc_delete_before=ts, soft=pb.SoftTruncate(deleted_column="_fivetran_deleted"))
    _call(stub.Truncate, req, f"Truncate {table.name}", label)
