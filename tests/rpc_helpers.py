"""Small builders for requests, shared by the tests."""
from __future__ import annotations

from datetime import datetime, timezone

import grpc
import pytest

from delta_destination.doors.fivetran._proto import common_pb2, destination_sdk_pb2 as pb

T = common_pb2


def col(name, typ, pk=False, precision=None, scale=None, sbl=None):
    c = common_pb2.Column(name=name, type=getattr(common_pb2, typ) if isinstance(typ, str) else typ, primary_key=pk)
    if precision is not None:
        c.params.decimal.precision = precision
        c.params.decimal.scale = scale or 0
    if sbl is not None:
        c.params.string_byte_length = sbl
    return c


def table(name, *cols):
    return common_pb2.Table(name=name, columns=list(cols))


def ts(dt: datetime):
    from google.protobuf.timestamp_pb2 import Timestamp

    t = Timestamp()
    t.FromDatetime(dt.astimezone(timezone.utc).replace(tzinfo=None))
    return t


def expect_error(fn, code=None) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    if code is not None:
        assert info.value.code() == code, (info.value.code(), info.value.details())
    return info.value


def describe(stub, schema, name):
    return stub.DescribeTable(pb.DescribeTableRequest(schema_name=schema, table_name=name))


def columns_of(resp):
    out = {}
    for c in resp.table.columns:
        params = None
        if c.HasField("params"):
            w = c.params.WhichOneof("params")
            params = (c.params.decimal.precision, c.params.decimal.scale) if w == "decimal" else c.params.string_byte_length
        out[c.name] = (common_pb2.DataType.Name(c.type), c.primary_key, params)
    return out


# For tests that hold for any warehouse: run them on a local directory and on the session's real
# S3 server (tests/conftest.py: warehouse_kind; the S3 variants belong to the full tier).
ON_BOTH_STORAGES = pytest.mark.parametrize("warehouse_kind", ["local", "s3"], indirect=True, scope="session")


def files_under(server, location: str) -> list[str]:
    """Every file (object) under `location` of the server's warehouse, local or S3."""
    from testkit.tester import warehouse_of

    return [e.location for e in warehouse_of(server.warehouse, server.storage_options).storage.list(location, recursive=True)]


def entries_of(server, location: str) -> list[str]:
    """The names directly under `location` that hold files (S3 prefixes without objects do not count)."""
    from testkit.tester import warehouse_of

    storage = warehouse_of(server.warehouse, server.storage_options).storage
    return sorted({e.name for e in storage.list(location) if not e.is_dir or storage.list(e.location, recursive=True)})
