"""Fivetran requests for the tests: table and column builders, real encrypted batch files and the
WriteBatch / WriteHistoryBatch requests that name them, and checks of what a server answered."""
from __future__ import annotations

import datetime as dt
import itertools
import random
from datetime import datetime, timezone
from pathlib import Path

import grpc
import pytest

from delta_destination.core.model import DataType
from delta_destination.doors.fivetran._proto import common_pb2, destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.batch_files import Compression, Encryption
from testkit.batch_files import UNMODIFIED, format_value, new_key, write_batch_file

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


# ---- batch files and WriteBatch requests -------------------------------------------------------------

NULL_STRING = "null-m8yilkvPsNulehxl2G6pmSQ3G3WWdLP"
UNMOD_STRING = "unmod-NcK9NIjPUutCsz4mjOQQztbnwnE1sY3"
_counter = itertools.count()


def _types(table_proto):
    return {c.name: DataType(c.type) for c in table_proto.columns}


def batch_file(tmp_path: Path, table_proto, rows, *, columns=None, kind="replace", compression=Compression.ZSTD,
               encrypt=True, shuffle=True):
    """rows: dicts column -> python value / None (NULL) / UNMODIFIED. Returns (path, key)."""
    types = _types(table_proto)
    cols = list(columns or (rows[0].keys() if rows else types))
    if shuffle:
        random.Random(len(cols)).shuffle(cols)
    path = tmp_path / f"{kind}_{next(_counter)}.csv{'.zst' if compression == Compression.ZSTD else '.gz' if compression == Compression.GZIP else ''}{'.aes' if encrypt else ''}"
    key = new_key() if encrypt else None
    body = [[format_value(types[c], r.get(c, UNMODIFIED if kind == "update" else None)) for c in cols] for r in rows]
    write_batch_file(path, cols, body, key=key, compression=compression, null_string=NULL_STRING,
                     unmodified_string=UNMOD_STRING)
    return str(path), key


def write_request(schema, table_proto, *, replace=(), update=(), delete=(), compression=Compression.ZSTD, encrypt=True,
                  keys_override=None):
    """replace/update/delete: lists of (path, key) pairs from batch_file()."""
    keys = {}
    for p, k in (*replace, *update, *delete):
        if k is not None:
            keys[p] = k
    if keys_override is not None:
        keys = keys_override
    return pb.WriteBatchRequest(
        schema_name=schema,
        table=table_proto,
        keys=keys,
        replace_files=[p for p, _ in replace],
        update_files=[p for p, _ in update],
        delete_files=[p for p, _ in delete],
        file_params=pb.FileParams(
            compression=int(compression),
            encryption=int(Encryption.AES if encrypt else Encryption.NONE),
            null_string=NULL_STRING,
            unmodified_string=UNMOD_STRING,
        ),
    )


# ---- history mode (WriteHistoryBatch) ------------------------------------------------------------------
# H: a history-mode table; t(h, m): a UTC time on 2024-01-01; version(...): one row version, active
# until MAX unless `values` say otherwise; history_request(...): a WriteHistoryBatch of such rows.

UTC = dt.timezone.utc
MAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)


def t(h, m=0):
    return dt.datetime(2024, 1, 1, h, m, tzinfo=UTC)


H = table(
    "hist",
    col("id", "INT", pk=True), col("name", "STRING"), col("amount", "DOUBLE"),
    col("_fivetran_start", "UTC_DATETIME", pk=True), col("_fivetran_end", "UTC_DATETIME"),
    col("_fivetran_active", "BOOLEAN"), col("_fivetran_synced", "UTC_DATETIME"),
)


def version(i, start, **values):
    r = {"id": i, "_fivetran_start": start, "_fivetran_end": MAX, "_fivetran_active": True, "_fivetran_synced": start}
    r.update(values)
    return r


def history_request(schema, tmp_path, *, earliest=(), update=(), replace=(), delete=(), update_columns=None):
    base = write_request(
        schema, H,
        replace=[batch_file(tmp_path, H, list(replace))] if replace else [],
        update=[batch_file(tmp_path, H, list(update), kind="update", columns=update_columns)] if update else [],
        delete=[batch_file(tmp_path, H, list(delete), kind="delete", columns=["id", "_fivetran_end", "_fivetran_synced"])] if delete else [],
    )
    e_files = [batch_file(tmp_path, H, list(earliest), kind="earliest", columns=["id", "_fivetran_start"])] if earliest else []
    req = pb.WriteHistoryBatchRequest(
        schema_name=schema, table=H, replace_files=base.replace_files, update_files=base.update_files,
        delete_files=base.delete_files, earliest_start_files=[p for p, _ in e_files], file_params=base.file_params,
    )
    for k, v in base.keys.items():
        req.keys[k] = v
    for p, k in e_files:
        req.keys[p] = k
    return req
