"""Writes batch files the way Fivetran does, for tests, the tester client and the benchmark.

CSV: header row, fields quoted only when needed (they contain `,` `"` CR or
LF; `"` doubled inside, no backslash escapes), "\\n" line ends, NULL /
unmodified cells written as null_string / unmodified_string; then zstd / gzip / no compression; then
AES-256-CBC with a random IV written first and PKCS#7 padding (when a key is
given).  Parquet: an Arrow table shaped like Fivetran's Avro-written files
(date/time types as strings, BINARY as bytes), then the same encryption.

Everything streams to the file, so large benchmark files do not need to fit in
memory.
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import gzip
import io
import json
import math
import os
import re
from typing import Any, Iterable, Optional

from delta_destination.core.model import DataType, TableSchema
from delta_destination.doors.fivetran.batch_files import Compression, FileFormat


class _Sentinel:
    def __init__(self, name: str):
        self._name = name

    def __repr__(self) -> str:
        return self._name


NULL = _Sentinel("NULL")
UNMODIFIED = _Sentinel("UNMODIFIED")

FT = DataType


def new_key() -> bytes:
    return os.urandom(32)


# ----------------------------------------------------------------------------
# Values
# ----------------------------------------------------------------------------


def _java_float(value: float) -> str:
    """Floats as text; non-finite values in Java's spelling, as Fivetran writes them."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return str(value)


def format_value(ftype: DataType, value: Any):
    """Python/JSON value -> Fivetran CSV text.

    NULL / UNMODIFIED (and None, as NULL) are passed through as sentinels so a
    whole row can be mapped with this function.  Strings are taken as already
    formatted (dates/times as ISO text, numbers keep their text), except for
    BINARY, where a str is encoded as UTF-8 and then base64 like bytes.
    """
    if value is None or value is NULL:
        return NULL
    if value is UNMODIFIED:
        return UNMODIFIED
    t = FT(ftype)
    if t == FT.BINARY:
        if isinstance(value, str):
            value = value.encode("utf-8")
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, str):
        return value
    if t == FT.BOOLEAN:
        if isinstance(value, bool):
            return "true" if value else "false"
        raise ValueError(f"BOOLEAN value of type {type(value).__name__}")
    if t in (FT.SHORT, FT.INT, FT.LONG):
        if isinstance(value, bool):
            raise ValueError("a bool is not an integer")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, decimal.Decimal) and value == value.to_integral_value():
            value = int(value)
        if isinstance(value, int):
            return str(value)
        raise ValueError(f"{t.name} value of type {type(value).__name__}")
    if t in (FT.DECIMAL, FT.FLOAT, FT.DOUBLE):
        if isinstance(value, bool):
            raise ValueError("a bool is not a number")
        if isinstance(value, float):
            return _java_float(value)
        if isinstance(value, (int, decimal.Decimal)):
            return str(value)
        raise ValueError(f"{t.name} value of type {type(value).__name__}")
    if t == FT.UTC_DATETIME and isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat(timespec="microseconds" if value.microsecond else "seconds") + "Z"
    if t == FT.NAIVE_DATETIME and isinstance(value, _dt.datetime):
        return value.replace(tzinfo=None).isoformat()
    if t == FT.NAIVE_DATE and isinstance(value, _dt.date):
        return value.isoformat()
    if t == FT.NAIVE_TIME and isinstance(value, _dt.time):
        return value.isoformat()
    if t == FT.JSON and isinstance(value, (dict, list, bool, int, float)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# ----------------------------------------------------------------------------
# Streams: encrypt, compress
# ----------------------------------------------------------------------------


class _AesWriter(io.RawIOBase):
    """AES-256-CBC, random IV first, PKCS#7 padding added on close()."""

    def __init__(self, f, key: bytes):
        super().__init__()
        from cryptography.hazmat.primitives import padding
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        if len(key) != 32:
            raise ValueError("AES-256 key must be 32 bytes")
        iv = os.urandom(16)
        self._f = f
        self._enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
        self._pad = padding.PKCS7(128).padder()
        f.write(iv)

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        b = bytes(b)
        self._f.write(self._enc.update(self._pad.update(b)))
        return len(b)

    def close(self):
        if not self.closed:
            self._f.write(self._enc.update(self._pad.finalize()) + self._enc.finalize())
            self._f.close()
        super().close()


class _Closing(io.RawIOBase):
    """Adapts a compressor's writer so close() flushes it and closes what is below."""

    def __init__(self, writer, below):
        super().__init__()
        self._w = writer
        self._below = below

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self._w.write(b)
        return len(b)

    def close(self):
        if not self.closed:
            self._w.close()
            self._below.close()
        super().close()


def open_sink(path, key: Optional[bytes], compression: Compression):
    """A binary writer into `path` that compresses, then encrypts (with `key`), as Fivetran's files
    are; close() ends the compressed frame and pads the cipher. For tests and the benchmark that
    write their own bytes (corrupt frames, streamed CSV)."""
    f = open(path, "wb")
    sink = _AesWriter(f, key) if key is not None else f
    comp = Compression(compression)
    if comp == Compression.ZSTD:
        import zstandard

        # Streamed, like zstd-jni's ZstdOutputStream: the frame has no content size.
        w = zstandard.ZstdCompressor().stream_writer(sink, closefd=False)
        return _Closing(w, sink)
    if comp == Compression.GZIP:
        return _Closing(gzip.GzipFile(fileobj=sink, mode="wb", mtime=0), sink)
    return sink


# ----------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------


def _cell(v, null_string: str, unmodified_string: str) -> str:
    if v is NULL or v is None:
        return null_string
    if v is UNMODIFIED:
        return unmodified_string
    if not isinstance(v, str):
        raise TypeError(f"CSV cells must be formatted strings, NULL or UNMODIFIED (got {type(v).__name__})")
    return v


_SPECIAL = re.compile(r'[,"\r\n]')


def _csv_line(fields: list[str]) -> str:
    """RFC 4180 minimal quoting, by hand: Python 3.11's csv module (QUOTE_MINIMAL,
    lineterminator "\n") leaves a bare "\r" unquoted, which Fivetran's writer quotes."""
    if len(fields) == 1 and fields[0] == "":
        return '""\n'  # a lone empty field is quoted, or the line would be blank
    out = []
    for f in fields:
        if _SPECIAL.search(f):
            f = '"' + f.replace('"', '""') + '"'
        out.append(f)
    return ",".join(out) + "\n"


def write_batch_file(path, header: list[str], rows: Iterable[list], *, key: Optional[bytes],
                     compression: Compression, null_string: str, unmodified_string: str,
                     file_format: FileFormat = FileFormat.CSV, table: Optional[TableSchema] = None) -> None:
    """Write one batch file (see the module docstring)."""
    if FileFormat(file_format) == FileFormat.PARQUET:
        if table is None:
            raise ValueError("Parquet batch files need `table` for the column types")
        _write_parquet(path, header, rows, key=key, compression=compression, null_string=null_string,
                       unmodified_string=unmodified_string, table=table)
        return
    sink = open_sink(path, key, compression)
    text = None
    try:
        # Closing the TextIOWrapper closes the whole chain: buffer, compressor (frame end), cipher (padding).
        text = io.TextIOWrapper(io.BufferedWriter(sink, 1 << 20), encoding="utf-8", newline="")
        text.write(_csv_line([str(h) for h in header]))
        n = len(header)
        for row in rows:
            if len(row) != n:
                raise ValueError(f"row has {len(row)} fields, header has {n}")
            text.write(_csv_line([_cell(v, null_string, unmodified_string) for v in row]))
    finally:
        if text is not None:
            text.close()
        else:
            sink.close()


def _parquet_type(col):
    import pyarrow as pa

    t = FT(col.type)
    if t == FT.BOOLEAN:
        return pa.bool_()
    if t in (FT.SHORT, FT.INT):
        return pa.int32()
    if t == FT.LONG:
        return pa.int64()
    if t == FT.FLOAT:
        return pa.float32()
    if t == FT.DOUBLE:
        return pa.float64()
    if t == FT.DECIMAL:
        p, s = col.decimal_params()
        return pa.decimal128(p, s)
    if t == FT.BINARY:
        return pa.binary()
    return pa.string()  # STRING, JSON, XML, and the date/time types (Avro writes them as strings)


def _parquet_value(col, v, null_string: str, unmodified_string: str):
    """Formatted text (or a plain Python value) -> the Python value for the Parquet column."""
    t = FT(col.type)
    if v is NULL or v is None:
        return None
    stored_as_string = _parquet_type(col).equals(__import__("pyarrow").string())
    if v is UNMODIFIED:
        if not stored_as_string:
            raise ValueError(f"column {col.name!r}: an unmodified marker cannot be stored in a typed "
                             "Parquet column (Fivetran's encoding for that is undocumented)")
        return unmodified_string
    if stored_as_string:
        return v if isinstance(v, str) else format_value(t, v)
    if not isinstance(v, str):
        if t == FT.BINARY and isinstance(v, (bytes, bytearray)):
            return bytes(v)
        return v
    if t == FT.BOOLEAN:
        return v.lower() == "true"
    if t in (FT.SHORT, FT.INT, FT.LONG):
        return int(v)
    if t in (FT.FLOAT, FT.DOUBLE):
        return float(v)
    if t == FT.DECIMAL:
        return decimal.Decimal(v)
    if t == FT.BINARY:
        return base64.b64decode(v, validate=True)
    return v


def _write_parquet(path, header, rows, *, key, compression, null_string, unmodified_string, table):
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = []
    for h in header:
        c = table.get(h)
        if c is None:
            raise ValueError(f"column {h!r} is not in the table")
        cols.append(c)
    rows = list(rows)
    arrays = []
    for i, c in enumerate(cols):
        if any(r[i] is UNMODIFIED for r in rows) and not _parquet_type(c).equals(pa.string()):
            # Fivetran's encoding of unmodified cells in typed Parquet columns is undocumented.
            # This writer's convention (the reading the destination documents as safe): such a
            # column is written as text, formatted as in CSV, with the unmodified marker.
            vals = [None if (r[i] is NULL or r[i] is None) else unmodified_string if r[i] is UNMODIFIED
                    else (r[i] if isinstance(r[i], str) else format_value(FT(c.type), r[i])) for r in rows]
            arrays.append(pa.array(vals, pa.string()))
            continue
        vals = [_parquet_value(c, r[i], null_string, unmodified_string) for r in rows]
        arrays.append(pa.array(vals, _parquet_type(c)))
    data = pa.Table.from_arrays(arrays, names=list(header))
    mem = io.BytesIO()
    pq.write_table(data, mem)
    sink = open_sink(path, key, compression)
    try:
        sink.write(mem.getvalue())
    finally:
        sink.close()
