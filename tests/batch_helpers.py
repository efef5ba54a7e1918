"""Writing real encrypted batch files and WriteBatch requests for the tests."""
from __future__ import annotations

import itertools
import random
from pathlib import Path

from testkit.batch_files import UNMODIFIED, format_value, new_key, write_batch_file
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.batch_files import Compression, Encryption
from delta_destination.core.model import DataType

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
