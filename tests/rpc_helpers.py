"""Small builders for requests, shared by the tests."""
from __future__ import annotations

from datetime import datetime, timezone

import grpc
import pytest

from delta_destination.fivetran._proto import common_pb2, destination_sdk_pb2 as pb

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
