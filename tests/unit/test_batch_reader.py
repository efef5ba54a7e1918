"""Batch reader: writer -> reader round trips for every type, and every error case.

Pure Python: no server. Error tests also check that messages never quote the
offending value.
"""
from __future__ import annotations

import datetime as dt
import gzip
import io
import math
import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from testkit.batch_files import NULL, UNMODIFIED, format_value, new_key, open_sink, write_batch_file
from delta_destination.core import types as br
from delta_destination import errors
from delta_destination.doors.fivetran.batch_files import errors as file_errors
from delta_destination.doors.fivetran.batch_files import (
    BatchData, Compression, Encryption, FileFormat, FileParams, open_plaintext, read_batch_file,
)
from delta_destination.core.model import Column, DataType as FT, TableSchema

NUL = "__null__"
UNM = "__unmodified__"
UTC = dt.timezone.utc


# ----------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------


def params(*, key=None, compression=Compression.OFF, null=NUL, unmod=UNM, fmt=FileFormat.CSV):
    return FileParams(compression, Encryption.AES if key is not None else Encryption.NONE, null, unmod, fmt)


def write(tmp_path: Path, header, rows, *, name="batch.csv", key=None, compression=Compression.OFF,
          null=NUL, unmod=UNM, fmt=FileFormat.CSV, table=None) -> str:
    path = str(tmp_path / name)
    write_batch_file(path, header, rows, key=key, compression=compression, null_string=null,
                     unmodified_string=unmod, file_format=fmt, table=table)
    return path


def write_raw(tmp_path: Path, data: bytes, *, name="raw.csv", key=None, compression=Compression.OFF) -> str:
    """Arbitrary plaintext bytes, compressed and encrypted like a batch file."""
    path = str(tmp_path / name)
    sink = open_sink(path, key, compression)
    sink.write(data)
    sink.close()
    return path


def read(path, table, *, key=None, compression=Compression.OFF, allow_unmodified=False, null=NUL, unmod=UNM,
         fmt=FileFormat.CSV) -> BatchData:
    return read_batch_file(path, key, params(key=key, compression=compression, null=null, unmod=unmod, fmt=fmt),
                           table, allow_unmodified=allow_unmodified)


def table_of(*cols: Column) -> TableSchema:
    return TableSchema("t", (Column("id", FT.INT, primary_key=True),) + tuple(cols))


def raises(exc, fn, *, not_in=(), match=None):
    """Assert fn() raises exactly `exc` (or a subclass) and its message quotes none of `not_in`."""
    with pytest.raises(exc) as ei:
        fn()
    msg = str(ei.value)
    for v in not_in:
        if v and len(v) >= 3:
            assert v not in msg, f"message leaks a value: {msg!r}"
    if match:
        assert re.search(match, msg), msg
    return msg


def aes_raw(key: bytes, iv: bytes, plaintext_blocks: bytes) -> bytes:
    """IV + CBC ciphertext of already block-aligned plaintext (no padding added)."""
    enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return iv + enc.update(plaintext_blocks) + enc.finalize()


def f32(x) -> float:
    return float(np.float32(x))


# ----------------------------------------------------------------------------
# round trips: every type, normal and edge values
# ----------------------------------------------------------------------------

BIN_VALUES = [b"", b"a", b"ab", b"abc", b"abcd", bytes(range(256)), b"\x00\x00\x00", "[B@7d4991ad"]

ROUND_TRIPS = [
    ("boolean", Column("v", FT.BOOLEAN), ["true", "false", "TRUE", "False"], [True, False, True, False]),
    ("short", Column("v", FT.SHORT), ["-32768", "32767", "0", "-0", "007"], [-32768, 32767, 0, 0, 7]),
    ("int", Column("v", FT.INT), [str(-2**31), str(2**31 - 1), "42"], [-2**31, 2**31 - 1, 42]),
    ("long", Column("v", FT.LONG), [str(-2**63), str(2**63 - 1), "1234567890123"], [-2**63, 2**63 - 1, 1234567890123]),
    ("decimal_38_37", Column("v", FT.DECIMAL, precision=38, scale=37),
     ["9.9999999999999999999999999999999999999", "-9.9999999999999999999999999999999999999",
      "0.0000000000000000000000000000000000001", "1.5", "-0", "0"],
     [Decimal("9.9999999999999999999999999999999999999"), Decimal("-9.9999999999999999999999999999999999999"),
      Decimal("1E-37"), Decimal("1.5"), Decimal(0), Decimal(0)]),
    ("decimal_38_0", Column("v", FT.DECIMAL, precision=38, scale=0),
     ["9" * 38, "-" + "9" * 38, "0" * 45 + "1", "12.000"],
     [Decimal("9" * 38), Decimal("-" + "9" * 38), Decimal(1), Decimal(12)]),
    ("decimal_38_10", Column("v", FT.DECIMAL, precision=38, scale=10),
     ["12345.1234567890", "1.2345678901234568E+22", "1.5e-3", "1.23" + "0" * 50, ".5", "5.", "+5", "-0.0000000001",
      "1234567890123456789012345678.0123456789", "0E-20", "123E-10"],
     [Decimal("12345.123456789"), Decimal("12345678901234568000000"), Decimal("0.0015"), Decimal("1.23"),
      Decimal("0.5"), Decimal(5), Decimal(5), Decimal("-1E-10"),
      Decimal("1234567890123456789012345678.0123456789"), Decimal(0), Decimal("1.23E-8")]),
    ("decimal_default", Column("v", FT.DECIMAL), ["3.14"], [Decimal("3.14")]),
    ("decimal_6_3", Column("v", FT.DECIMAL, precision=6, scale=3), ["999.999", "-999.999", "0.001"],
     [Decimal("999.999"), Decimal("-999.999"), Decimal("0.001")]),
    ("float", Column("v", FT.FLOAT),
     ["3.4028235E38", "1.4E-45", "Infinity", "-Infinity", "3.4028237E+38", "-0.0", "1.0E10", "10.12"],
     [f32(3.4028235e38), f32(1.4e-45), math.inf, -math.inf, math.inf, -0.0, 1.0e10, f32(10.12)]),
    ("double", Column("v", FT.DOUBLE),
     ["1.7976931348623157E308", "4.9E-324", "-Infinity", "Infinity", "100.123456789", "1e3", "-2.5"],
     [1.7976931348623157e308, 5e-324, -math.inf, math.inf, 100.123456789, 1000.0, -2.5]),
    ("naive_date", Column("v", FT.NAIVE_DATE), ["0001-01-01", "9999-12-31", "2007-12-03", "2024-02-29"],
     [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2007, 12, 3), dt.date(2024, 2, 29)]),
    ("naive_datetime", Column("v", FT.NAIVE_DATETIME),
     ["0001-01-01T00:00:00", "9999-12-31T23:59:59.999999", "2007-12-03T10:15:30", "2007-12-03 10:15:30.5",
      "2007-12-03T10:15:30.123456789", "2007-12-03T10:15"],
     [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(2007, 12, 3, 10, 15, 30),
      dt.datetime(2007, 12, 3, 10, 15, 30, 500000), dt.datetime(2007, 12, 3, 10, 15, 30, 123456),
      dt.datetime(2007, 12, 3, 10, 15)]),
    ("utc_datetime", Column("v", FT.UTC_DATETIME),
     ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z", "2007-12-03T10:15:30.123Z",
      "2007-12-03T10:15:30+02:00", "2007-12-03T10:15:30.999999999-05:30", "2007-12-03T10:15:30",
      "2023-10-27T15:00:00.000Z", "2007-12-03T10:15Z"],
     [dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
      dt.datetime(2007, 12, 3, 10, 15, 30, 123000, tzinfo=UTC), dt.datetime(2007, 12, 3, 8, 15, 30, tzinfo=UTC),
      dt.datetime(2007, 12, 3, 15, 45, 30, 999999, tzinfo=UTC), dt.datetime(2007, 12, 3, 10, 15, 30, tzinfo=UTC),
      dt.datetime(2023, 10, 27, 15, tzinfo=UTC), dt.datetime(2007, 12, 3, 10, 15, tzinfo=UTC)]),
    ("naive_time", Column("v", FT.NAIVE_TIME), ["10:15:30", "00:00:00", "23:59:59.999999999", "10:15"],
     ["10:15:30", "00:00:00", "23:59:59.999999999", "10:15:00"]),
    ("binary", Column("v", FT.BINARY), [format_value(FT.BINARY, b) for b in BIN_VALUES],
     [b if isinstance(b, bytes) else b.encode() for b in BIN_VALUES]),
    ("string", Column("v", FT.STRING),
     ["", "null", "NULL", " lead", "trail ", "a,b", 'q"uo""te"', "line\nbreak", "crlf\r\nx", "cr\rx",
      "back\\slash\\", "\\\"", "unicode ünï €𝄞", "\t tab", ",", '"', "=", NUL + " "],
     ["", "null", "NULL", " lead", "trail ", "a,b", 'q"uo""te"', "line\nbreak", "crlf\r\nx", "cr\rx",
      "back\\slash\\", "\\\"", "unicode ünï €𝄞", "\t tab", ",", '"', "=", NUL + " "]),
    ("json", Column("v", FT.JSON), ['{"a":123}', "[1,2]", "null"], ['{"a":123}', "[1,2]", "null"]),
    ("xml", Column("v", FT.XML), ["<tag>This is xml</tag>", "<a b=\"c\"/>"], ["<tag>This is xml</tag>", "<a b=\"c\"/>"]),
    ("unspecified", Column("v", FT.UNSPECIFIED), ["x", ""], ["x", ""]),
]


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(b):
            return math.isnan(a)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("label,col,texts,expected", ROUND_TRIPS, ids=[r[0] for r in ROUND_TRIPS])
def test_round_trip_every_type(tmp_path, label, col, texts, expected):
    table = table_of(col)
    rows = [[str(i), t] for i, t in enumerate(texts)] + [[str(len(texts)), NULL]]
    data = read(write(tmp_path, ["id", "v"], rows), table)
    assert data.num_rows == len(texts) + 1
    assert data.values.schema.field("v").type == br.arrow_type(col)
    got = data.values.column("v").to_pylist()
    assert got[-1] is None
    for g, e in zip(got[:-1], expected):
        assert _same(g, e), (label, g, e)
    assert data.values.column("id").to_pylist() == list(range(len(texts) + 1))
    assert data.unmodified is None


def test_nan(tmp_path):
    table = table_of(Column("f", FT.FLOAT), Column("d", FT.DOUBLE))
    data = read(write(tmp_path, ["id", "f", "d"], [["1", "NaN", "NaN"]]), table)
    assert math.isnan(data.values.column("f")[0].as_py()) and math.isnan(data.values.column("d")[0].as_py())


def test_binary_many_rows_with_nulls(tmp_path):
    """Exercise the one-call base64 decode: padding 0/1/2, empty values and NULLs interleaved."""
    rng = np.random.default_rng(7)
    values = []
    for i in range(2000):
        if i % 7 == 3:
            values.append(None)
        else:
            values.append(rng.integers(0, 256, size=int(rng.integers(0, 12)), dtype=np.uint8).tobytes())
    rows = [[str(i), NULL if v is None else format_value(FT.BINARY, v)] for i, v in enumerate(values)]
    data = read(write(tmp_path, ["id", "v"], rows), table_of(Column("v", FT.BINARY)))
    assert data.values.column("v").to_pylist() == values


def test_format_value():
    assert format_value(FT.BOOLEAN, True) == "true" and format_value(FT.BOOLEAN, False) == "false"
    assert format_value(FT.LONG, 2**63 - 1) == str(2**63 - 1)
    assert format_value(FT.DECIMAL, Decimal("12345.123456789012345")) == "12345.123456789012345"
    assert format_value(FT.DOUBLE, float("inf")) == "Infinity"
    assert format_value(FT.FLOAT, float("-inf")) == "-Infinity"
    assert format_value(FT.DOUBLE, float("nan")) == "NaN"
    assert format_value(FT.BINARY, b"hi") == "aGk="
    assert format_value(FT.BINARY, "hi") == "aGk="
    assert format_value(FT.UTC_DATETIME, "2023-10-27T15:00:00.000Z") == "2023-10-27T15:00:00.000Z"
    assert format_value(FT.UTC_DATETIME, dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2020-01-02T03:04:05Z"
    assert format_value(FT.NAIVE_DATE, dt.date(2020, 1, 2)) == "2020-01-02"
    assert format_value(FT.JSON, {"a": 123}) == '{"a":123}'
    assert format_value(FT.STRING, None) is NULL
    assert format_value(FT.STRING, UNMODIFIED) is UNMODIFIED


def test_tester_style_values(tmp_path):
    """Values as the tester's JSON gives them (JSON numbers kept as text via Decimal)."""
    import json

    row = json.loads('{"id": 1, "amount_decimal": 1.2345678901234568e+22, "amount_float": 10.12, '
                     '"flag": true, "binary_val": "[B@7d4991ad", "utc_val": "2023-10-27T15:00:00.000Z"}',
                     parse_float=Decimal)
    table = TableSchema("t", (Column("id", FT.INT), Column("amount_decimal", FT.DECIMAL, precision=38, scale=10),
                              Column("amount_float", FT.FLOAT), Column("flag", FT.BOOLEAN),
                              Column("binary_val", FT.BINARY), Column("utc_val", FT.UTC_DATETIME)))
    header = list(row)
    cells = [format_value(table.get(h).type, row[h]) for h in header]
    got = read(write(tmp_path, header, [cells]), table).values.to_pylist()[0]
    assert got == {"id": 1, "amount_decimal": Decimal("12345678901234568000000"), "amount_float": f32(10.12),
                   "flag": True, "binary_val": b"[B@7d4991ad",
                   "utc_val": dt.datetime(2023, 10, 27, 15, tzinfo=UTC)}


# ----------------------------------------------------------------------------
# CSV layout: quoting, header order, nulls, unmodified, BOM, line ends
# ----------------------------------------------------------------------------

TRICKY = ["a,b", 'say "hi"', "multi\nline", "crlf\r\nline", "back\\slash \\n \\\"", "  spaced  ", "", "null",
          '"', '""', ",,,", "\n", "trailing\n"]


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "aes"])
def test_compression_and_encryption_matrix(tmp_path, compression, encrypted):
    key = new_key() if encrypted else None
    table = table_of(Column("s", FT.STRING), Column("n", FT.LONG))
    rows = [[str(i), t, str(i * 1000)] for i, t in enumerate(TRICKY)]
    path = write(tmp_path, ["id", "s", "n"], rows, key=key, compression=compression)
    data = read(path, table, key=key, compression=compression)
    assert data.values.column("s").to_pylist() == TRICKY
    assert data.values.column("n").to_pylist() == [i * 1000 for i in range(len(TRICKY))]
    if encrypted:
        raw = Path(path).read_bytes()
        assert b"spaced" not in raw and len(raw) % 16 == 0


def test_quoting_literal_backslashes_and_crlf_plaintext(tmp_path):
    """Hand-written CSV: backslash is not an escape; CRLF record ends; quotes doubled."""
    text = b'id,s\r\n1,"x\\"\r\n2,"he said ""hi"", ok"\r\n3,plain\\text\r\n4,"multi\r\nline"\r\n5,  sp  \r\n'
    data = read(write_raw(tmp_path, text), table_of(Column("s", FT.STRING)))
    assert data.values.column("s").to_pylist() == ["x\\", 'he said "hi", ok', "plain\\text", "multi\r\nline",
                                                    "  sp  "]


def test_shuffled_header_and_subset(tmp_path):
    table = TableSchema("t", (Column("a", FT.INT), Column("b", FT.STRING), Column("c", FT.BOOLEAN),
                              Column("d", FT.DOUBLE)))
    data = read(write(tmp_path, ["c", "a", "b"], [["true", "1", "x"], ["false", "2", "y"]]), table)
    assert data.values.column_names == ["a", "b", "c"]
    assert data.values.to_pylist() == [{"a": 1, "b": "x", "c": True}, {"a": 2, "b": "y", "c": False}]


def test_null_string_vs_empty_vs_word_null(tmp_path):
    table = table_of(Column("s", FT.STRING), Column("n", FT.INT))
    rows = [["1", NULL, NULL], ["2", "", "5"], ["3", "null", "6"], ["4", "NULL", "7"], ["5", NUL + "x", "8"]]
    data = read(write(tmp_path, ["id", "s", "n"], rows), table)
    assert data.values.column("s").to_pylist() == [None, "", "null", "NULL", NUL + "x"]
    assert data.values.column("n").to_pylist() == [None, 5, 6, 7, 8]


def test_empty_null_string_means_empty_cells_are_null(tmp_path):
    table = table_of(Column("s", FT.STRING))
    path = write(tmp_path, ["id", "s"], [["1", ""], ["2", "x"]], null="")
    assert read(path, table, null="").values.column("s").to_pylist() == [None, "x"]


def test_unmodified_allowed(tmp_path):
    table = table_of(Column("s", FT.STRING), Column("n", FT.INT), Column("b", FT.BINARY),
                     Column("u", FT.UTC_DATETIME))
    rows = [["1", UNMODIFIED, "5", UNMODIFIED, "2020-01-01T00:00:00Z"],
            ["2", "x", UNMODIFIED, NULL, UNMODIFIED],
            ["3", NULL, NULL, "aGk=", NULL]]
    data = read(write(tmp_path, ["id", "s", "n", "b", "u"], rows), table, allow_unmodified=True)
    assert data.values.to_pylist() == [
        {"id": 1, "s": None, "n": 5, "b": None, "u": dt.datetime(2020, 1, 1, tzinfo=UTC)},
        {"id": 2, "s": "x", "n": None, "b": None, "u": None},
        {"id": 3, "s": None, "n": None, "b": b"hi", "u": None},
    ]
    assert data.unmodified is not None
    assert data.unmodified.column_names == data.values.column_names
    assert data.unmodified.schema.types == [pa.bool_()] * 5
    assert data.unmodified.to_pylist() == [
        {"id": False, "s": True, "n": False, "b": True, "u": False},
        {"id": False, "s": False, "n": True, "b": False, "u": True},
        {"id": False, "s": False, "n": False, "b": False, "u": False},
    ]


def test_unmodified_allowed_but_absent_gives_none(tmp_path):
    table = table_of(Column("s", FT.STRING))
    data = read(write(tmp_path, ["id", "s"], [["1", "x"], ["2", NULL]]), table, allow_unmodified=True)
    assert data.unmodified is None


def test_unmodified_not_allowed_is_a_value(tmp_path):
    table = table_of(Column("s", FT.STRING))
    data = read(write(tmp_path, ["id", "s"], [["1", UNMODIFIED]]), table, allow_unmodified=False)
    assert data.values.column("s").to_pylist() == [UNM]
    assert data.unmodified is None
    # ... and so it must fit the type: in an INT column it is a conversion error.
    path = write(tmp_path, ["id"], [[UNMODIFIED]], name="u2.csv")
    raises(errors.ValueConversionError, lambda: read(path, table), not_in=[UNM])


def test_empty_unmodified_string_disables_markers(tmp_path):
    table = table_of(Column("s", FT.STRING))
    path = write(tmp_path, ["id", "s"], [["1", ""]], unmod="")
    data = read(path, table, unmod="", allow_unmodified=True)
    assert data.values.column("s").to_pylist() == [""] and data.unmodified is None


def test_bom_is_stripped(tmp_path):
    data = read(write_raw(tmp_path, b"\xef\xbb\xbfid,s\n1,x\n"), table_of(Column("s", FT.STRING)))
    assert data.values.column_names == ["id", "s"] and data.values.to_pylist() == [{"id": 1, "s": "x"}]


def test_no_final_newline(tmp_path):
    table = table_of(Column("s", FT.STRING))
    assert read(write_raw(tmp_path, b"id,s\n1,x"), table).values.to_pylist() == [{"id": 1, "s": "x"}]
    assert read(write_raw(tmp_path, b"id,s", name="h.csv"), table).num_rows == 0


def test_header_only(tmp_path):
    table = table_of(Column("v", FT.DECIMAL, precision=10, scale=2), Column("b", FT.BINARY))
    for comp in Compression:
        data = read(write(tmp_path, ["v", "id"], [], compression=comp, name=f"{comp.name}.csv"), table,
                    compression=comp)
        assert data.num_rows == 0 and data.values.num_rows == 0
        assert data.values.schema == pa.schema([("id", pa.int32()), ("v", pa.decimal128(10, 2))])


def test_single_column_empty_value(tmp_path):
    """A one-column row holding "" is written as a quoted "" and must not be skipped as a blank line."""
    table = TableSchema("t", (Column("s", FT.STRING),))
    data = read(write(tmp_path, ["s"], [[""], ["x"], [""]]), table)
    assert data.values.column("s").to_pylist() == ["", "x", ""]


def test_multi_batch_row_numbers_and_small_chunks(tmp_path, monkeypatch):
    """Small blocks/chunks: many record batches, chunked decrypt/decompress, rows counted across batches."""
    from delta_destination.doors.fivetran.batch_files import csv_reader, streams

    monkeypatch.setattr(csv_reader, "CSV_BLOCK", 4096)
    monkeypatch.setattr(csv_reader, "CHUNK", 1000)
    monkeypatch.setattr(streams, "CHUNK", 1000)
    monkeypatch.setattr(streams, "ZSTD_IN_CHUNK", 100)
    key = new_key()
    table = table_of(Column("s", FT.STRING), Column("b", FT.BINARY), Column("n", FT.SHORT))
    rows = [[str(i), f"row {i}\nline, \"{i}\"", format_value(FT.BINARY, str(i)), str(i % 30000)] for i in range(3000)]
    for comp in Compression:
        path = write(tmp_path, ["id", "s", "b", "n"], rows, key=key, compression=comp, name=f"m{comp.name}.csv")
        data = read(path, table, key=key, compression=comp)
        assert data.num_rows == 3000
        assert data.values.column("s").to_pylist() == [r[1] for r in rows]
        assert data.values.column("b").to_pylist() == [str(i).encode() for i in range(3000)]
    rows[2499][3] = "40000"
    path = write(tmp_path, ["id", "s", "b", "n"], rows, key=key, compression=Compression.ZSTD, name="bad.csv")
    raises(errors.ValueConversionError, lambda: read(path, table, key=key, compression=Compression.ZSTD),
           not_in=["40000"], match=r"^file bad\.csv: column 'n' \(SHORT\) row 2500: value does not fit")


def test_open_plaintext_streams(tmp_path):
    payload = b"".join(b"line %d, with some text\n" % i for i in range(50000))
    key = new_key()
    for comp in Compression:
        path = write_raw(tmp_path, payload, key=key, compression=comp, name=f"p{comp.name}")
        with open_plaintext(path, key, params(key=key, compression=comp)) as f:
            parts = []
            while True:
                b = f.read(65536)
                if not b:
                    break
                parts.append(b)
        assert b"".join(parts) == payload


def test_zstd_multiple_frames(tmp_path):
    body = zstandard.ZstdCompressor().compress(b"id,s\n1,a\n") + zstandard.ZstdCompressor().compress(b"2,b\n")
    path = str(tmp_path / "mf.csv")
    Path(path).write_bytes(body)
    data = read(path, table_of(Column("s", FT.STRING)), compression=Compression.ZSTD)
    assert data.values.column("s").to_pylist() == ["a", "b"]


# ----------------------------------------------------------------------------
# errors: encryption
# ----------------------------------------------------------------------------

CSV_BODY = b"id,s\n1,secret-value\n"


def test_wrong_key(tmp_path):
    # Fixed keys and IV: deterministic; this wrong key decrypts the last block to invalid padding.
    k1, k2, iv = bytes(range(32)), bytes(range(1, 33)), bytes(range(16))
    padder = padding.PKCS7(128).padder()
    path = tmp_path / "wk.csv"
    path.write_bytes(aes_raw(k1, iv, padder.update(CSV_BODY) + padder.finalize()))
    table = table_of(Column("s", FT.STRING))
    assert read(str(path), table, key=k1).values.column("s").to_pylist() == ["secret-value"]
    msg = raises(file_errors.DecryptionError, lambda: read(str(path), table, key=k2), not_in=["secret-value"])
    assert k2.hex() not in msg and "wrong key" in msg


def test_wrong_random_key_is_a_batch_file_error(tmp_path):
    key = new_key()
    path = write(tmp_path, ["id", "s"], [["1", "secret-value"]], key=key, compression=Compression.ZSTD)
    for _ in range(3):
        raises(file_errors.BatchFileError, lambda: read(path, table_of(Column("s", FT.STRING)), key=new_key(),
                                                   compression=Compression.ZSTD), not_in=["secret-value"])


def test_missing_key(tmp_path):
    key = new_key()
    path = write(tmp_path, ["id"], [["1"]], key=key)
    with pytest.raises(file_errors.MissingKey):
        read_batch_file(path, None, params(key=key), table_of(), allow_unmodified=False)


@pytest.mark.parametrize("bad_key", [b"x" * 16, b"x" * 31, b"x" * 33, b""])
def test_short_or_long_key(tmp_path, bad_key):
    path = write(tmp_path, ["id"], [["1"]], key=new_key())
    raises(file_errors.DecryptionError, lambda: read(path, table_of(), key=bad_key), match="32 bytes")


@pytest.mark.parametrize("cut", [1, 5, 15])
def test_truncated_ciphertext(tmp_path, cut):
    key = new_key()
    path = Path(write(tmp_path, ["id"], [[str(i)] for i in range(100)], key=key))
    path.write_bytes(path.read_bytes()[:-cut])
    raises(file_errors.DecryptionError, lambda: read(str(path), table_of(), key=key), match="truncated or corrupt")


@pytest.mark.parametrize("size", [0, 10, 16, 17, 31])
def test_ciphertext_too_short(tmp_path, size):
    path = tmp_path / "short.csv"
    path.write_bytes(b"\x01" * size)
    raises(file_errors.DecryptionError, lambda: read(str(path), table_of(), key=new_key()), match="truncated or corrupt")


@pytest.mark.parametrize("last_block", [
    b"id\n1\n" + b"\x00" * 11,            # pad byte 0: never valid
    b"id\n1\n" + b"x" * 10 + b"\x11",     # 17 > block size
    b"id\n1\n" + b"x" * 8 + b"\x02\x03\x03",  # inconsistent pad bytes
], ids=["zero", "too-big", "inconsistent"])
def test_bad_padding(tmp_path, last_block):
    key = new_key()
    path = tmp_path / "pad.csv"
    path.write_bytes(aes_raw(key, bytes(16), last_block))
    raises(file_errors.DecryptionError, lambda: read(str(path), table_of(), key=key), match="bad padding")


def test_padding_zero_bytes_are_data(tmp_path):
    """Real PKCS7: NUL bytes before the padding are kept (never stripped)."""
    key = new_key()
    payload = b"abc\x00\x00\x00"
    path = write_raw(tmp_path, payload, key=key)
    with open_plaintext(path, key, params(key=key)) as f:
        assert f.read(100) == payload


# ----------------------------------------------------------------------------
# errors: compression
# ----------------------------------------------------------------------------


def test_zero_byte_file(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_bytes(b"")
    table = table_of()
    raises(file_errors.CsvFormatError, lambda: read(str(path), table), match="empty file: no header")
    raises(file_errors.DecompressionError, lambda: read(str(path), table, compression=Compression.ZSTD))
    raises(file_errors.DecompressionError, lambda: read(str(path), table, compression=Compression.GZIP))
    raises(file_errors.DecryptionError, lambda: read(str(path), table, key=new_key()))


def test_empty_plaintext_after_decompression(tmp_path):
    for comp in (Compression.ZSTD, Compression.GZIP):
        path = write_raw(tmp_path, b"", compression=comp, name=f"e{comp.name}")
        raises(file_errors.CsvFormatError, lambda: read(path, table_of(), compression=comp), match="empty file")


@pytest.mark.parametrize("encrypted", [False, True])
def test_corrupted_zstd(tmp_path, encrypted):
    key = new_key() if encrypted else None
    body = zstandard.ZstdCompressor().compress(CSV_BODY * 100)
    bad = b"\x00\x01\x02\x03" + body[4:]  # wrong magic number
    path = write_raw(tmp_path, bad, key=key)
    raises(file_errors.DecompressionError, lambda: read(path, table_of(Column("s", FT.STRING)), key=key,
                                                   compression=Compression.ZSTD), not_in=["secret-value"])
    trailing = write_raw(tmp_path, body + b"garbage!", key=key, name="trailing")
    raises(file_errors.DecompressionError, lambda: read(trailing, table_of(Column("s", FT.STRING)), key=key,
                                                   compression=Compression.ZSTD))


@pytest.mark.parametrize("where", ["minus1", "half", "header"])
@pytest.mark.parametrize("encrypted", [False, True])
def test_truncated_zstd(tmp_path, where, encrypted):
    key = new_key() if encrypted else None
    body = zstandard.ZstdCompressor().compress(
        b"id,s\n" + b"".join(b"%d,secret-value %d\n" % (i, i) for i in range(2000)))
    cut = {"minus1": len(body) - 1, "half": len(body) // 2, "header": 5}[where]
    path = write_raw(tmp_path, body[:cut], key=key)
    raises(file_errors.DecompressionError, lambda: read(path, table_of(Column("s", FT.STRING)), key=key,
                                                   compression=Compression.ZSTD),
           not_in=["secret-value"], match="truncated")


@pytest.mark.parametrize("cut", [1, 8, 100])
def test_truncated_gzip(tmp_path, cut):
    body = gzip.compress(b"id,s\n" + b"".join(b"%d,v%d\n" % (i, i) for i in range(2000)))
    path = write_raw(tmp_path, body[:-cut])
    raises(file_errors.DecompressionError, lambda: read(path, table_of(Column("s", FT.STRING)),
                                                   compression=Compression.GZIP))


def test_corrupted_gzip(tmp_path):
    body = gzip.compress(CSV_BODY * 50)
    path = write_raw(tmp_path, b"XX" + body[2:])
    raises(file_errors.DecompressionError, lambda: read(path, table_of(Column("s", FT.STRING)),
                                                   compression=Compression.GZIP))
    # corrupt deflate data / CRC
    flipped = bytearray(body)
    flipped[len(flipped) // 2] ^= 0xFF
    path = write_raw(tmp_path, bytes(flipped), name="flip")
    raises(file_errors.DecompressionError, lambda: read(path, table_of(Column("s", FT.STRING)),
                                                   compression=Compression.GZIP), not_in=["secret-value"])


def test_plain_file_read_as_zstd(tmp_path):
    path = write_raw(tmp_path, CSV_BODY)
    raises(file_errors.DecompressionError, lambda: read(path, table_of(Column("s", FT.STRING)),
                                                   compression=Compression.ZSTD))


# ----------------------------------------------------------------------------
# errors: CSV structure
# ----------------------------------------------------------------------------


def test_duplicate_header(tmp_path):
    path = write_raw(tmp_path, b"id,s,s\n1,a,b\n")
    raises(file_errors.CsvFormatError, lambda: read(path, table_of(Column("s", FT.STRING))), match="duplicate")


def test_empty_header_name(tmp_path):
    path = write_raw(tmp_path, b"id,,s\n1,a,b\n")
    raises(file_errors.CsvFormatError, lambda: read(path, table_of(Column("s", FT.STRING))), match="empty column name")


def test_unknown_column(tmp_path):
    path = write(tmp_path, ["id", "mystery"], [["1", "x"]])
    msg = raises(errors.SchemaMismatch, lambda: read(path, table_of(Column("s", FT.STRING))))
    assert "'mystery'" in msg


@pytest.mark.parametrize("body,what", [
    (b"id,s\n1,secret-value,extra-secret\n", "expected 2, got 3"),
    (b"id,s\n1,a\n2\n", "expected 2, got 1"),
    (b"id,s\n1,a\n2,secret-value\n3,b,c-secret\n", "expected 2, got 3"),
])
def test_wrong_number_of_fields(tmp_path, body, what):
    path = write_raw(tmp_path, body)
    raises(file_errors.CsvFormatError, lambda: read(path, table_of(Column("s", FT.STRING))),
           not_in=["secret-value", "extra-secret", "c-secret"], match=re.escape(what))


@pytest.mark.parametrize("col", [Column("s", FT.STRING), Column("s", FT.INT)], ids=["string", "int"])
def test_unterminated_quote(tmp_path, col):
    path = write_raw(tmp_path, b'id,s\n1,"secret-value\n2,3\n')
    raises(file_errors.CsvFormatError, lambda: read(path, table_of(col)), not_in=["secret-value"],
           match="unterminated quote")


def test_invalid_utf8(tmp_path):
    path = write_raw(tmp_path, b"id,s\n1,secret-value\xff\xfe\n")
    raises(file_errors.CsvFormatError, lambda: read(path, table_of(Column("s", FT.STRING))),
           not_in=["secret-value"], match="invalid UTF-8")


def test_invalid_utf8_in_encrypted_compressed(tmp_path):
    key = new_key()
    path = write_raw(tmp_path, b"id,s\n1,ok\n2,\xc3\x28\n", key=key, compression=Compression.GZIP)
    raises(file_errors.CsvFormatError, lambda: read(path, table_of(Column("s", FT.STRING)), key=key,
                                               compression=Compression.GZIP), match="invalid UTF-8")


# ----------------------------------------------------------------------------
# errors: values
# ----------------------------------------------------------------------------

BAD_VALUES = [
    (Column("v", FT.SHORT), ["32768", "-32769", "1.0", "", "abc", "+1", " 12"]),
    (Column("v", FT.INT), ["2147483648", "-2147483649", "1e3"]),
    (Column("v", FT.LONG), ["9223372036854775808", "-9223372036854775809", "0x10"]),
    (Column("v", FT.BOOLEAN), ["yes", "1", "", "t", "truee"]),
    (Column("v", FT.DECIMAL, precision=38, scale=0), ["9" * 39, "1" + "0" * 40, "123.5", "1e38", "1e-1"]),
    (Column("v", FT.DECIMAL, precision=38, scale=20), ["1.2345678901234568e+22", "123456789012345678901.5"]),
    (Column("v", FT.DECIMAL, precision=6, scale=3), ["1000", "1.2345", "-1.0001", "abc", "1e", "NaN", "",
                                                     "1.2.3", "1e99999999999", "1e-99999999999"]),
    (Column("v", FT.FLOAT), ["abc", "", "1.5f", "1,5"]),
    (Column("v", FT.DOUBLE), ["1.5.5", "--1", "Inf inity"]),
    (Column("v", FT.NAIVE_DATE), ["2007-02-30", "2007-13-01", "20071203", "0000-01-01", "2007-12-03T00:00:00",
                                  "2007-1-3", "", "10000-01-01"]),
    (Column("v", FT.NAIVE_DATETIME), ["2007-12-03T24:00:00", "2007-12-03", "2007-12-03T10:15:30Z",
                                      "2007-12-03T10:15:30.1234567890", "2007-12-03T10:15:30.", "2007-02-30T00:00:00",
                                      "2007-12-03T10:15:30+01:00", "0000-12-31T23:59:59"]),
    (Column("v", FT.UTC_DATETIME), ["2007-12-03T10:15:30 UTC", "0001-01-01T00:00:00+01:00", "2007-12-03",
                                    "2007-12-03T10:15:30.1234567890Z", "9999-12-31T23:59:59-01:00",
                                    "2007-12-03T10:61:30Z", "2007-12-03T10:15:30z"]),
    (Column("v", FT.NAIVE_TIME), ["24:00:00", "10:60:00", "1:15:30", "10:15:30.", "10:15:30.1234567890",
                                  "10:15:60", "", "10"]),
    (Column("v", FT.BINARY), ["abc", "a===", "ab=c", "YQ==YQ==", "Zm9v\n", "Zm9v!", "Zm9v YmFy", "Y"]),
]
BAD_CASES = [(c, v) for c, vals in BAD_VALUES for v in vals]


@pytest.mark.parametrize("col,bad", BAD_CASES,
                         ids=[f"{c.type.name}-{i}" for i, (c, _) in enumerate(BAD_CASES)])
def test_value_conversion_errors(tmp_path, col, bad):
    good = {FT.SHORT: "1", FT.INT: "1", FT.LONG: "1", FT.BOOLEAN: "true", FT.DECIMAL: "1", FT.FLOAT: "1.5",
            FT.DOUBLE: "1.5", FT.NAIVE_DATE: "2020-01-01", FT.NAIVE_DATETIME: "2020-01-01T00:00:00",
            FT.UTC_DATETIME: "2020-01-01T00:00:00Z", FT.NAIVE_TIME: "00:00:00", FT.BINARY: "AAAA"}[col.type]
    rows = [["1", good], ["2", NULL], ["3", bad], ["4", good]]
    path = write(tmp_path, ["id", "v"], rows, name="vals.csv")
    tname = col.type.name if col.type != FT.DECIMAL else rf"DECIMAL\({col.precision},{col.scale}\)"
    raises(errors.ValueConversionError, lambda: read(path, table_of(col)), not_in=[bad],
           match=rf"^file vals\.csv: column 'v' \({tname}\) row 3: value does not fit: \S")


def test_decimal_reasons(tmp_path):
    col = Column("v", FT.DECIMAL, precision=6, scale=3)
    cases = {"1.2345": "fractional digits", "1234.5": "integer digits", "x": "not a decimal",
             "1.2345e0": "fractional digits", "1e3": "integer digits"}
    for i, (bad, why) in enumerate(cases.items()):
        path = write(tmp_path, ["id", "v"], [["1", bad]], name=f"d{i}.csv")
        raises(errors.ValueConversionError, lambda: read(path, table_of(col)), match=why)


def test_first_failing_row_is_reported(tmp_path):
    rows = [[str(i), str(i)] for i in range(100)]
    rows[41][1] = "70000"
    rows[80][1] = "x"
    path = write(tmp_path, ["id", "v"], rows, name="f.csv")
    raises(errors.ValueConversionError, lambda: read(path, table_of(Column("v", FT.SHORT))), match="row 42:")


@pytest.mark.parametrize("col,early,late", [
    (Column("v", FT.NAIVE_DATE), "0000-01-01", "bad-date"),          # range check vs format check
    (Column("v", FT.UTC_DATETIME), "2007-12-03T25:00:00Z", "nope"),   # parse vs format
    (Column("v", FT.INT), "9999999999", "abc"),                        # overflow vs syntax
    (Column("v", FT.BINARY), "Y", "!!!!"),
    (Column("v", FT.DECIMAL, precision=5, scale=2), "1.5e9", "1.234"),  # exponent form vs plain
])
def test_earliest_bad_row_across_checks(tmp_path, col, early, late):
    rows = [["1", NULL], ["2", early], ["3", late], ["4", early]]
    path = write(tmp_path, ["id", "v"], rows, name="e.csv")
    raises(errors.ValueConversionError, lambda: read(path, table_of(col)), match="row 2:")
    rows = [["1", NULL], ["2", late], ["3", early]]
    path = write(tmp_path, ["id", "v"], rows, name="l.csv")
    raises(errors.ValueConversionError, lambda: read(path, table_of(col)), match="row 2:")


def test_invalid_utf8_in_header(tmp_path):
    path = write_raw(tmp_path, b"id,s\xff\n1,a\n")
    raises(file_errors.CsvFormatError, lambda: read(path, table_of(Column("s", FT.STRING))), match="invalid UTF-8")


def test_errors_are_typed_input_errors():
    """File-stage errors are BatchFileErrors; a value that does not fit is the core's
    ValueConversionError (shared by every door); all are invalid input (INVALID_ARGUMENT)."""
    for cls in (file_errors.MissingKey, file_errors.DecryptionError, file_errors.DecompressionError, file_errors.CsvFormatError,
                file_errors.ParquetFormatError):
        assert issubclass(cls, file_errors.BatchFileError)
    for cls in (file_errors.BatchFileError, errors.ValueConversionError, errors.SchemaMismatch):
        assert issubclass(cls, errors.InvalidRequest)


# ----------------------------------------------------------------------------
# Parquet
# ----------------------------------------------------------------------------

PQ_TABLE = TableSchema("t", (
    Column("id", FT.INT, primary_key=True), Column("flag", FT.BOOLEAN), Column("sh", FT.SHORT),
    Column("lg", FT.LONG), Column("fl", FT.FLOAT), Column("db", FT.DOUBLE),
    Column("dec", FT.DECIMAL, precision=38, scale=10), Column("d", FT.NAIVE_DATE),
    Column("ts", FT.NAIVE_DATETIME), Column("utc", FT.UTC_DATETIME), Column("tm", FT.NAIVE_TIME),
    Column("bin", FT.BINARY), Column("s", FT.STRING), Column("j", FT.JSON),
))


@pytest.mark.parametrize("encrypted", [False, True])
def test_parquet_round_trip(tmp_path, encrypted):
    key = new_key() if encrypted else None
    header = PQ_TABLE.column_names
    rows = [
        ["1", "true", "-32768", str(2**63 - 1), "3.4028235E38", "1.7976931348623157E308",
         "1234567890123456789012345678.0123456789", "0001-01-01", "9999-12-31T23:59:59.999999",
         "2007-12-03T10:15:30.123456789Z", "10:15:30", format_value(FT.BINARY, b"\x00\xff"), "", '{"a":1}'],
        ["2", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL],
        ["3", "false", "32767", str(-2**63), "-Infinity", "NaN", "-0.5", "2024-02-29", "2007-12-03T10:15",
         "2007-12-03T10:15:30+02:00", "23:59:59.5", format_value(FT.BINARY, b""), "null", "[]"],
    ]
    path = write(tmp_path, header, rows, key=key, fmt=FileFormat.PARQUET, table=PQ_TABLE, name="b.parquet")
    data = read(path, PQ_TABLE, key=key, fmt=FileFormat.PARQUET)
    assert data.num_rows == 3 and data.unmodified is None
    assert data.values.schema == pa.schema([(c.name, br.arrow_type(c)) for c in PQ_TABLE.columns])
    r1, r2, r3 = data.values.to_pylist()
    assert r1 == {"id": 1, "flag": True, "sh": -32768, "lg": 2**63 - 1, "fl": f32(3.4028235e38),
                  "db": 1.7976931348623157e308, "dec": Decimal("1234567890123456789012345678.0123456789"),
                  "d": dt.date(1, 1, 1), "ts": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
                  "utc": dt.datetime(2007, 12, 3, 10, 15, 30, 123456, tzinfo=UTC), "tm": "10:15:30",
                  "bin": b"\x00\xff", "s": "", "j": '{"a":1}'}
    assert all(v is None for k, v in r2.items() if k != "id")
    assert r3["fl"] == -math.inf and math.isnan(r3["db"]) and r3["utc"] == dt.datetime(2007, 12, 3, 8, 15, 30,
                                                                                          tzinfo=UTC)
    assert r3["s"] == "null" and r3["bin"] == b"" and r3["ts"] == dt.datetime(2007, 12, 3, 10, 15)


def test_parquet_unmodified_in_string_columns(tmp_path):
    table = table_of(Column("s", FT.STRING), Column("u", FT.UTC_DATETIME), Column("n", FT.LONG))
    rows = [["1", UNMODIFIED, UNMODIFIED, "5"], ["2", "x", NULL, NULL]]
    path = write(tmp_path, ["id", "s", "u", "n"], rows, fmt=FileFormat.PARQUET, table=table, name="u.parquet")
    data = read(path, table, fmt=FileFormat.PARQUET, allow_unmodified=True)
    assert data.values.to_pylist() == [{"id": 1, "s": None, "u": None, "n": 5},
                                       {"id": 2, "s": "x", "u": None, "n": None}]
    assert data.unmodified.to_pylist() == [{"id": False, "s": True, "u": True, "n": False},
                                           {"id": False, "s": False, "u": False, "n": False}]
    # not allowed: the marker is a plain value (so it must fit the type)
    path = write(tmp_path, ["id", "s"], [["1", UNMODIFIED]], fmt=FileFormat.PARQUET, table=table, name="s.parquet")
    data = read(path, table, fmt=FileFormat.PARQUET, allow_unmodified=False)
    assert data.values.column("s").to_pylist() == [UNM] and data.unmodified is None
    raises(errors.ValueConversionError, lambda: read(path.replace("s.parquet", "u.parquet"), table,
                                                     fmt=FileFormat.PARQUET), match=r"column 'u' .* row 1:")


def _write_pq(tmp_path, tbl: pa.Table, name="x.parquet", key=None) -> str:
    mem = io.BytesIO()
    pq.write_table(tbl, mem)
    return write_raw(tmp_path, mem.getvalue(), name=name, key=key)


def test_parquet_overflow_and_bad_values(tmp_path):
    t = table_of(Column("v", FT.SHORT))
    path = _write_pq(tmp_path, pa.table({"id": pa.array([1, 2], pa.int32()), "v": pa.array([5, 40000], pa.int32())}))
    raises(errors.ValueConversionError, lambda: read(path, t, fmt=FileFormat.PARQUET), not_in=["40000"],
           match=r"column 'v' \(SHORT\) row 2:")
    t = table_of(Column("v", FT.DECIMAL, precision=10, scale=2))
    path = _write_pq(tmp_path, pa.table({"v": pa.array([Decimal("1.50"), Decimal("1.234")], pa.decimal128(12, 3))}),
                     name="d.parquet")
    raises(errors.ValueConversionError, lambda: read(path, t, fmt=FileFormat.PARQUET), match="row 2:")
    t = table_of(Column("v", FT.UTC_DATETIME))
    path = _write_pq(tmp_path, pa.table({"v": pa.array(["2020-01-01T00:00:00Z", "not-a-time"])}), name="u.parquet")
    raises(errors.ValueConversionError, lambda: read(path, t, fmt=FileFormat.PARQUET), not_in=["not-a-time"],
           match="row 2:")


def test_parquet_typed_timestamps_and_wrong_types(tmp_path):
    t = table_of(Column("v", FT.UTC_DATETIME))
    ts = pa.array([1_000_000_001_234], pa.timestamp("ns", tz="UTC"))
    data = read(_write_pq(tmp_path, pa.table({"v": ts})), t, fmt=FileFormat.PARQUET)
    assert data.values.column("v").to_pylist() == [dt.datetime(1970, 1, 1, 0, 16, 40, 1, tzinfo=UTC)]
    t = table_of(Column("v", FT.INT))
    path = _write_pq(tmp_path, pa.table({"v": pa.array([True])}), name="w.parquet")
    raises(errors.SchemaMismatch, lambda: read(path, t, fmt=FileFormat.PARQUET))


def test_parquet_errors(tmp_path):
    t = table_of(Column("s", FT.STRING))
    path = write_raw(tmp_path, b"PAR1 this is not parquet", name="bad.parquet")
    raises(file_errors.ParquetFormatError, lambda: read(path, t, fmt=FileFormat.PARQUET))
    path = _write_pq(tmp_path, pa.table({"id": [1], "nope": ["x"]}), name="unk.parquet")
    raises(errors.SchemaMismatch, lambda: read(path, t, fmt=FileFormat.PARQUET), match="'nope'")
    key = new_key()
    path = _write_pq(tmp_path, pa.table({"s": ["x"]}), name="enc.parquet", key=key)
    assert read(path, t, key=key, fmt=FileFormat.PARQUET).values.column("s").to_pylist() == ["x"]
    raises(file_errors.MissingKey, lambda: read_batch_file(path, None, params(key=key, fmt=FileFormat.PARQUET), t,
                                                      allow_unmodified=False))
