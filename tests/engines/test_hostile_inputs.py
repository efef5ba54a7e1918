"""Hostile inputs: a data-driven corpus of bad requests through real gRPC (issue 5, part 2).

Every case is one request built from deliberately broken input: bad keys, IVs and
padding; truncated or corrupted zstd/gzip; malformed CSV; values out of range;
unsafe names; unknown enum values; missing tables and columns. For each one the
test asserts
  - a clear error: the expected gRPC status and a message naming the problem,
  - that no planted value (`SECRET-...`) or configuration secret is quoted in
    the error or the server log,
  - that every table (Delta version + rows) and the warehouse directory listing
    (recursive: paths, sizes, mtimes) are exactly as before the request.
A few inputs are accepted by design (a UTF-8 BOM is stripped, a header-only
file is a batch without rows); those cases assert that instead.

The corpus is the list CASES below; `test_corpus_size` counts it (figures for
docs/reliability.md are stored in the pytest cache under `reliability/hostile`).
"""
from __future__ import annotations

import datetime as dt
import gzip
import os
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import grpc
import pytest
import zstandard
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from testkit.batch_files import new_key, open_sink
from testkit.fivetran_requests import NULL_STRING, UNMOD_STRING, batch_file, col, table, ts, write_request
from testkit.delta_read import delta_version, read_delta_table
from delta_destination.doors.fivetran._proto import common_pb2, destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.batch_files import Compression, Encryption

SC = grpc.StatusCode
TASK = "TASK"  # a response carrying a Task (an error the customer must fix) instead of a gRPC status
UTC = dt.timezone.utc
T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
MAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)

SECRET = "SECRET-" + uuid.uuid4().hex                       # planted customer value
SECRET_TOKEN = "SECRET-TOKEN-" + uuid.uuid4().hex           # planted configuration secret
CONFIG = {"secret_token": SECRET_TOKEN}

LIVE = table(
    "target",
    col("id", "INT", pk=True), col("s", "SHORT"), col("i", "INT"), col("l", "LONG"),
    col("dec", "DECIMAL", precision=5, scale=2), col("f", "DOUBLE"), col("d", "NAIVE_DATE"), col("t", "NAIVE_TIME"),
    col("ndt", "NAIVE_DATETIME"), col("u", "UTC_DATETIME"), col("bin", "BINARY"), col("b", "BOOLEAN"),
    col("str", "STRING"), col("_fivetran_synced", "UTC_DATETIME"), col("_fivetran_deleted", "BOOLEAN"),
)
HIST = table(
    "hist",
    col("id", "INT", pk=True), col("name", "STRING"), col("_fivetran_start", "UTC_DATETIME", pk=True),
    col("_fivetran_end", "UTC_DATETIME"), col("_fivetran_active", "BOOLEAN"), col("_fivetran_synced", "UTC_DATETIME"),
)
TABLES = {"target": LIVE, "hist": HIST}
SCHEMA = "hostile"


def live_row(i, **over):
    r = {"id": i, "s": 7, "i": 8, "l": 9, "dec": "123.45", "f": 1.5, "d": "2024-01-02", "t": "10:15:30",
         "ndt": "2024-01-02T10:15:30", "u": "2024-01-02T10:15:30.123Z", "bin": b"\x00\x01", "b": True,
         "str": SECRET, "_fivetran_synced": T0, "_fivetran_deleted": False}
    r.update(over)
    return r


def hist_row(i, start=T0, **over):
    r = {"id": i, "name": SECRET, "_fivetran_start": start, "_fivetran_end": MAX, "_fivetran_active": True,
         "_fivetran_synced": start}
    r.update(over)
    return r


# ----------------------------------------------------------------------------
# the environment the cases run in
# ----------------------------------------------------------------------------


class Ctx:
    """A dedicated server with two populated tables; helpers to write (broken) batch files."""

    def __init__(self, start_server, base: Path, extra_args=()):
        self.base = base
        self.files = base / "files"
        self.files.mkdir(parents=True, exist_ok=True)
        self.srv = start_server(base / "warehouse", base / "server.log", extra_args=extra_args)
        self.stub = self.srv.stub
        self.warehouse = Path(self.srv.warehouse)
        self._n = 0

    def setup_tables(self, parquet=False):
        for t in (LIVE, HIST):
            assert self.stub.CreateTable(pb.CreateTableRequest(schema_name=SCHEMA, table=t, configuration=CONFIG)).success
        if parquet:
            return
        rows = [live_row(i) for i in range(1, 6)]
        assert self.stub.WriteBatch(self.wb(replace=[self.rows(rows)])).success
        h = [hist_row(i) for i in range(1, 4)]
        assert self.stub.WriteHistoryBatch(self.whb(replace=[self.rows(h, tbl=HIST)])).success

    # -- files ---------------------------------------------------------------------------
    def path(self, suffix=".csv") -> Path:
        self._n += 1
        return self.files / f"f{self._n}{suffix}"

    def rows(self, rows, *, tbl=LIVE, columns=None, kind="replace", compression=Compression.ZSTD, encrypt=True):
        return batch_file(self.files, tbl, rows, columns=columns, kind=kind, compression=compression, encrypt=encrypt,
                          shuffle=False)

    def raw(self, plaintext: bytes, *, compression=Compression.ZSTD, encrypt=True):
        """Arbitrary plaintext, compressed and encrypted like a batch file: (path, key)."""
        p = self.path()
        key = new_key() if encrypt else None
        sink = open_sink(str(p), key, compression)
        sink.write(plaintext)
        sink.close()
        return str(p), key

    def bytes_file(self, data: bytes, key=None):
        p = self.path()
        p.write_bytes(data)
        return str(p), key

    def csv(self, text: str, **kw):
        return self.raw(text.encode("utf-8"), **kw)

    # -- requests ------------------------------------------------------------------------
    def wb(self, *, replace=(), update=(), delete=(), tbl=LIVE, keys=None, compression=Compression.ZSTD,
           encryption=Encryption.AES, schema=SCHEMA):
        req = write_request(schema, tbl, replace=replace, update=update, delete=delete, compression=compression,
                            keys_override=keys)
        req.file_params.encryption = int(encryption)
        req.configuration.update(CONFIG)
        return req

    def whb(self, *, earliest=(), replace=(), update=(), delete=(), tbl=HIST, keys=None, schema=SCHEMA,
            compression=Compression.ZSTD):
        allf = [*earliest, *replace, *update, *delete]
        req = pb.WriteHistoryBatchRequest(
            schema_name=schema, table=tbl, configuration=CONFIG,
            earliest_start_files=[p for p, _ in earliest], replace_files=[p for p, _ in replace],
            update_files=[p for p, _ in update], delete_files=[p for p, _ in delete],
            file_params=pb.FileParams(compression=int(compression), encryption=int(Encryption.AES),
                                      null_string=NULL_STRING, unmodified_string=UNMOD_STRING),
        )
        for p, k in (keys.items() if keys is not None else [(p, k) for p, k in allf if k is not None]):
            req.keys[p] = k
        return req

    # -- observation ---------------------------------------------------------------------
    def listing(self) -> dict:
        out = {}
        for dirpath, dirnames, filenames in os.walk(self.warehouse):
            rel = os.path.relpath(dirpath, self.warehouse)
            out[rel + "/"] = "dir"
            for f in filenames:
                st = os.stat(os.path.join(dirpath, f))
                out[os.path.join(rel, f)] = (st.st_size, st.st_mtime_ns)
        return out

    def table_states(self) -> dict:
        out = {}
        for name in TABLES:
            p = self.warehouse / SCHEMA / name
            if (p / "_delta_log").is_dir():
                out[name] = (delta_version(str(p)), sorted(map(repr, read_delta_table(str(p)).to_pylist())))
        return out

    def rows_of(self, name="target") -> dict:
        return {r["id"]: r for r in read_delta_table(str(self.warehouse / SCHEMA / name)).to_pylist()}


# ----------------------------------------------------------------------------
# the corpus
# ----------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    rpc: str
    build: Callable[[Ctx], object]
    code: object                               # a StatusCode, TASK, a tuple of them, or None: accepted by design
    words: tuple = ()                          # the message must name the problem: each must appear (case-insensitive)
    category: str = ""
    server: str = "csv"                       # "csv" or "parquet"
    not_in: tuple = ()                         # other texts the message must not quote (bad values)
    check: Optional[Callable[[Ctx, object], None]] = None  # accepted cases: what must hold afterwards
    unchanged: bool = True                     # accepted cases that must not change anything either


CASES: list[Case] = []


def case(id, rpc, build, code=SC.INVALID_ARGUMENT, words=(), **kw):
    CASES.append(Case(id, rpc, build, code, tuple(words), **kw))


HEADER = "id,str,_fivetran_synced"
GOOD = f'1,{SECRET},2024-05-01T12:00:00Z'


def csv_wb(text, *, compression=Compression.ZSTD, encrypt=True, kind="replace"):
    def build(c: Ctx):
        f = c.csv(text, compression=compression, encrypt=encrypt)
        return c.wb(**{kind: [f]}, compression=compression,
                    encryption=Encryption.AES if encrypt else Encryption.NONE)
    return build


# ---- keys, IV, padding -----------------------------------------------------------------

def _wrong_key_history(c: Ctx):
    p, _ = c.rows([hist_row(9)], tbl=HIST)
    return c.whb(replace=[(p, new_key())])


def _key_of_len(n):
    def build(c: Ctx):
        p, _ = c.rows([live_row(9)])
        return c.wb(replace=[(p, os.urandom(n) if n else b"")])
    return build


def _hex_key(c: Ctx):
    p, key = c.rows([live_row(9)])
    return c.wb(replace=[(p, key.hex().encode())])  # the key as hex text: 64 bytes


def _key_for_other_file(c: Ctx):
    p, key = c.rows([live_row(9)])
    return c.wb(replace=[(p, key)], keys={p + ".other": key})


def _key_of_other_file(c: Ctx):
    p1, k1 = c.rows([live_row(9)])
    p2, k2 = c.rows([live_row(10)])
    return c.wb(replace=[(p1, k2), (p2, k1)])  # the keys swapped between two files


def _iv_only(c: Ctx):
    return c.wb(replace=[c.bytes_file(os.urandom(16), new_key())])


def _iv_flipped(c: Ctx):
    p, key = c.rows([live_row(9)])
    data = bytearray(Path(p).read_bytes())
    data[0] ^= 0x01  # IV byte 0 -> plaintext byte 0 (zstd magic) changes
    Path(p).write_bytes(bytes(data))
    return c.wb(replace=[(p, key)])


def _aes_no_pad(key, iv, blocks: bytes) -> bytes:
    enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return iv + enc.update(blocks) + enc.finalize()


def _bad_padding(last: bytes):
    def build(c: Ctx):
        body = f"{HEADER}\n{GOOD}\n".encode()
        body += b"\n" * ((-len(body) - len(last)) % 16)
        key = new_key()
        return c.wb(replace=[c.bytes_file(_aes_no_pad(key, os.urandom(16), body + last), key)],
                    compression=Compression.OFF)
    return build


def _ragged_ciphertext(c: Ctx):
    p, key = c.rows([live_row(9)])
    Path(p).write_bytes(Path(p).read_bytes() + b"\x00" * 5)
    return c.wb(replace=[(p, key)])


def _aes_file_as_plain(c: Ctx):
    p, _ = c.rows([live_row(9)])
    return c.wb(replace=[(p, None)], keys={}, encryption=Encryption.NONE)


def _wrong_key_delete_file(c: Ctx):
    p, _ = c.rows([{"id": 1, "_fivetran_synced": T0}], columns=["id", "_fivetran_synced"], kind="delete")
    return c.wb(delete=[(p, new_key())])


case("key_wrong_history", "WriteHistoryBatch", _wrong_key_history, words=["decryption failed", "padding"], category="keys")
case("key_wrong_delete_file", "WriteBatch", _wrong_key_delete_file, words=["decryption failed"], category="keys")
case("key_31_bytes", "WriteBatch", _key_of_len(31), words=["32 bytes"], category="keys")
case("key_33_bytes", "WriteBatch", _key_of_len(33), words=["32 bytes"], category="keys")
case("key_empty", "WriteBatch", _key_of_len(0), words=["32 bytes"], category="keys")
case("key_as_hex_text", "WriteBatch", _hex_key, words=["32 bytes"], category="keys")
case("key_for_another_path", "WriteBatch", _key_for_other_file, words=["no decryption key"], category="keys")
case("keys_swapped_between_files", "WriteBatch", _key_of_other_file, words=["decryption failed"], category="keys")
case("iv_only", "WriteBatch", _iv_only, words=["truncated or corrupt"], category="iv/padding")
case("iv_flipped_bit", "WriteBatch", _iv_flipped, words=["zstd"], category="iv/padding")
case("padding_zero_byte", "WriteBatch", _bad_padding(b"x" * 15 + b"\x00"), words=["bad padding"], category="iv/padding")
case("padding_too_big", "WriteBatch", _bad_padding(b"x" * 15 + b"\x11"), words=["bad padding"], category="iv/padding")
case("padding_inconsistent", "WriteBatch", _bad_padding(b"x" * 13 + b"\x02\x03\x03"), words=["bad padding"], category="iv/padding")
case("ciphertext_not_whole_blocks", "WriteBatch", _ragged_ciphertext, words=["truncated or corrupt"], category="iv/padding")
case("encrypted_file_declared_plain", "WriteBatch", _aes_file_as_plain, words=["zstd"], category="keys")

# ---- compression ---------------------------------------------------------------------------


def _zstd_mutated(mutate, encrypt=True):
    def build(c: Ctx):
        body = zstandard.ZstdCompressor().compress((f"{HEADER}\n" + f"{GOOD}\n" * 200).encode())
        f = c.raw(mutate(body), compression=Compression.OFF, encrypt=encrypt)
        return c.wb(replace=[f], compression=Compression.ZSTD, encryption=Encryption.AES if encrypt else Encryption.NONE)
    return build


def _gzip_mutated(mutate):
    def build(c: Ctx):
        body = gzip.compress((f"{HEADER}\n" + f"{GOOD}\n" * 200).encode(), mtime=0)
        f = c.raw(mutate(body), compression=Compression.OFF)
        return c.wb(replace=[f], compression=Compression.GZIP)
    return build


def _flip(i):
    def m(b: bytes) -> bytes:
        b = bytearray(b)
        b[i if i >= 0 else len(b) + i] ^= 0xFF
        return bytes(b)
    return m


case("zstd_truncated_half", "WriteBatch", _zstd_mutated(lambda b: b[: len(b) // 2]), words=["zstd", "truncated"], category="compression")
case("zstd_truncated_plain_file", "WriteBatch", _zstd_mutated(lambda b: b[:-3], encrypt=False), words=["zstd", "truncated"], category="compression")
case("zstd_bad_magic", "WriteBatch", _zstd_mutated(_flip(1)), words=["corrupt zstd"], category="compression")
case("zstd_random_bytes", "WriteBatch", _zstd_mutated(lambda b: os.urandom(len(b))), words=["zstd"], category="compression")
case("zstd_trailing_garbage", "WriteBatch", _zstd_mutated(lambda b: b + b"garbage!"), words=["zstd"], category="compression")
case("zstd_empty_stream", "WriteBatch", _zstd_mutated(lambda b: b""), words=["empty zstd"], category="compression")
case("gzip_truncated", "WriteBatch", _gzip_mutated(lambda b: b[: len(b) // 2]), words=["gzip", "truncated"], category="compression")
case("gzip_crc_mismatch", "WriteBatch", _gzip_mutated(_flip(-6)), words=["corrupt gzip"], category="compression")
case("gzip_bad_magic", "WriteBatch", _gzip_mutated(_flip(0)), words=["corrupt gzip"], category="compression")
case("zstd_data_declared_gzip", "WriteBatch",
     lambda c: c.wb(replace=[c.csv(f"{HEADER}\n{GOOD}\n", compression=Compression.ZSTD)], compression=Compression.GZIP),
     words=["gzip"], category="compression")

# ---- CSV structure ---------------------------------------------------------------------------

case("empty_file_plain", "WriteBatch", lambda c: c.wb(replace=[c.bytes_file(b"")], compression=Compression.OFF,
                                                      encryption=Encryption.NONE),
     words=["empty file"], category="csv")
case("empty_plaintext_encrypted_zstd", "WriteBatch", csv_wb(""), words=["empty file"], category="csv")
case("empty_file_encrypted", "WriteBatch", lambda c: c.wb(replace=[c.bytes_file(b"", new_key())]),
     words=["truncated or corrupt"], category="csv")


def _accepted_unchanged(c: Ctx, resp):
    assert resp.success


case("header_only_is_an_empty_batch", "WriteBatch", csv_wb(f"{HEADER}\n"), code=None, check=_accepted_unchanged,
     category="csv")
case("header_only_without_key_column", "WriteBatch", csv_wb("str,_fivetran_synced\n"),
     words=["key column 'id' is missing"], category="csv")
case("duplicate_header_column", "WriteBatch", csv_wb(f"id,str,str\n1,{SECRET},x\n"), words=["duplicate column 'str'"], category="csv")
case("unknown_header_column_in_delete", "WriteBatch", csv_wb(f"id,nope\n1,{SECRET}\n", kind="delete"),
     words=["column 'nope' is not in table"], category="csv")
case("empty_header_name", "WriteBatch", csv_wb(f"id,,str\n1,2,{SECRET}\n"), words=["empty column name"], category="csv")
case("header_case_mismatch", "WriteBatch", csv_wb(f"ID,str\n1,{SECRET}\n"), words=["column 'ID' is not in table"], category="csv")
case("too_many_fields", "WriteBatch", csv_wb(f"{HEADER}\n{GOOD}\n2,{SECRET},2024-05-01T12:00:00Z,extra\n"),
     words=["wrong number of fields"], category="csv")
case("too_few_fields", "WriteBatch", csv_wb(f"{HEADER}\n{GOOD}\n2,{SECRET}\n"), words=["wrong number of fields"], category="csv")
case("unterminated_quote", "WriteBatch", csv_wb(f'{HEADER}\n{GOOD}\n2,"{SECRET},2024-05-01T12:00:00Z\n'),
     words=["unterminated quote"], category="csv")
case("unterminated_quote_in_header", "WriteBatch", csv_wb(f'id,"str\n1,{SECRET}\n'), words=["malformed csv"], category="csv")
case("invalid_utf8_in_value", "WriteBatch",
     lambda c: c.wb(replace=[c.raw(f"{HEADER}\n{GOOD}\n2,".encode() + SECRET.encode() + b"\xff\xfe,2024-05-01T12:00:00Z\n")]),
     words=["invalid utf-8"], category="csv")
case("invalid_utf8_in_header", "WriteBatch",
     lambda c: c.wb(replace=[c.raw(b"id,st\xc3\x28r\n1,x\n")]), words=["utf-8"], category="csv")
case("nul_bytes_in_header", "WriteBatch", lambda c: c.wb(replace=[c.raw(b"id\x00,str\n1,x\n")]),
     words=["is not in table"], category="csv")


def _bom_check(c: Ctx, resp):
    assert resp.success
    got = c.rows_of()
    assert got[901]["str"] == "bom-row", "the BOM must be stripped so the first header column is `id`"


case("utf8_bom_is_stripped", "WriteBatch", csv_wb(f"\ufeff{HEADER}\n901,bom-row,2024-05-01T12:00:00Z\n"), code=None,
     check=_bom_check, unchanged=False, category="csv")
case("null_key_via_marker", "WriteBatch", csv_wb(f"{HEADER}\n{NULL_STRING},{SECRET},2024-05-01T12:00:00Z\n"),
     words=["key column 'id'", "null"], category="csv")
case("unmodified_key_in_update", "WriteBatch", csv_wb(f"{HEADER}\n{UNMOD_STRING},{SECRET},2024-05-01T12:00:00Z\n", kind="update"),
     words=["key column 'id'", "unmodified"], category="csv")
case("same_file_listed_twice", "WriteBatch",
     lambda c: (lambda f: c.wb(replace=[f, f]))(c.rows([live_row(9)])), words=["same primary key more than once"], category="csv")


HUGE = 20 << 20


def _huge_field(c: Ctx):
    big = "A" * HUGE  # one 20 MiB field: more than the reader's 16 MiB CSV parse block
    return c.wb(replace=[c.csv(f"{HEADER}\n902,{big},2024-05-01T12:00:00Z\n")])


def _huge_field_check(c: Ctx, resp):
    """Accepted: the reader grows its block for one long row; the value arrives intact."""
    assert resp.success
    got = c.rows_of()[902]["str"]
    assert len(got) == HUGE and set(got) == {"A"}
    # remove it again so later cases do not carry 20 MiB around
    f = c.rows([{"id": 902, "_fivetran_synced": T0}], columns=["id", "_fivetran_synced"], kind="delete")
    assert c.stub.WriteBatch(c.wb(delete=[f])).success


def _huge_number(c: Ctx):
    return c.wb(replace=[c.csv(f"id,l\n1,{'9' * (1 << 20)}\n")])


case("huge_single_field_20MiB_accepted", "WriteBatch", _huge_field, code=None, check=_huge_field_check, unchanged=False,
     category="csv")
case("huge_number_1MiB_digits", "WriteBatch", _huge_number, words=["column 'l'", "row 1", "long"], category="values")

# ---- values -----------------------------------------------------------------------------------


def value_case(id, column, bad, typename, extra_words=()):
    text = f"id,{column},str\n1,{live_fmt(column)},{SECRET}\n2,{bad},{SECRET}\n"
    if '"' in bad or "," in bad:
        text = f'id,{column},str\n1,{live_fmt(column)},{SECRET}\n2,"{bad.replace(chr(34), chr(34) * 2)}",{SECRET}\n'
    case(f"value_{id}", "WriteBatch", csv_wb(text), words=[f"column '{column}'", "row 2", typename, *extra_words],
         category="values", not_in=(bad,) if len(bad) >= 5 else ())


def live_fmt(column):
    return {"s": "1", "i": "1", "l": "1", "dec": "1.5", "f": "1.5", "d": "2024-01-02", "t": "10:15:30",
            "ndt": "2024-01-02T10:15:30", "u": "2024-01-02T10:15:30Z", "bin": "AAE=", "b": "true"}[column]


value_case("short_overflow", "s", "32768", "SHORT")
value_case("short_underflow", "s", "-32769", "SHORT")
value_case("int_overflow", "i", "2147483648", "INT")
value_case("int_hex", "i", "0x10", "INT")
value_case("int_fraction", "i", "1.5", "INT")
value_case("int_blank_padded", "i", " 12", "INT")
value_case("long_overflow", "l", "9223372036854775808", "LONG")
value_case("long_underflow", "l", "-9223372036854775809", "LONG")
value_case("decimal_too_many_integer_digits", "dec", "1234.5", "DECIMAL(5,2)", ["integer digits"])
value_case("decimal_too_many_fraction_digits", "dec", "1.234", "DECIMAL(5,2)", ["scale"])
value_case("decimal_exponent_overflow", "dec", "1E+10", "DECIMAL(5,2)")
value_case("decimal_two_points", "dec", "1.2.3", "DECIMAL(5,2)", ["not a decimal"])
value_case("double_garbage", "f", "1.5x", "DOUBLE")
value_case("date_month_13", "d", "2024-13-01", "NAIVE_DATE")
value_case("date_feb_30", "d", "2023-02-30", "NAIVE_DATE")
value_case("date_year_0", "d", "0000-01-01", "NAIVE_DATE")
value_case("date_us_format", "d", "12/03/2007", "NAIVE_DATE")
value_case("time_hour_24", "t", "24:00:00", "NAIVE_TIME")
value_case("time_minute_61", "t", "10:61:00", "NAIVE_TIME")
value_case("naive_datetime_with_zone_garbage", "ndt", "2024-01-02T10:15:30Zjunk", "NAIVE_DATETIME")
value_case("utc_datetime_hour_25", "u", "2024-01-02T25:00:00Z", "UTC_DATETIME")
value_case("utc_datetime_year_10000", "u", "10000-01-01T00:00:00Z", "UTC_DATETIME")
value_case("utc_datetime_date_only", "u", "2024-01-02", "UTC_DATETIME")
value_case("boolean_yes", "b", "yes", "BOOLEAN")
value_case("base64_bad_character", "bin", "AA@=", "BINARY", ["base64"])
value_case("base64_bad_length", "bin", "AAE", "BINARY", ["base64"])
value_case("base64_bad_padding", "bin", "A===", "BINARY", ["base64"])

# ---- names ------------------------------------------------------------------------------------


def _named(rpc, schema=SCHEMA, name="target"):
    def build(c: Ctx):
        t = table(name, *LIVE.columns)
        if rpc == "WriteBatch":
            return c.wb(replace=[c.rows([live_row(9)])], tbl=t, schema=schema)
        if rpc == "WriteHistoryBatch":
            return c.whb(replace=[c.rows([hist_row(9)], tbl=HIST)], tbl=table(name, *HIST.columns), schema=schema)
        if rpc == "CreateTable":
            return pb.CreateTableRequest(schema_name=schema, table=t, configuration=CONFIG)
        if rpc == "AlterTable":
            return pb.AlterTableRequest(schema_name=schema, table=t, configuration=CONFIG)
        if rpc == "Truncate":
            return pb.TruncateRequest(schema_name=schema, table_name=name, synced_column="_fivetran_synced",
                                      utc_delete_before=ts(T0), configuration=CONFIG)
        if rpc == "DescribeTable":
            return pb.DescribeTableRequest(schema_name=schema, table_name=name, configuration=CONFIG)
        raise AssertionError(rpc)
    return build


case("name_table_dotdot_write", "WriteBatch", _named("WriteBatch", name=".."), words=["table name", "not allowed"], category="names")
case("name_schema_dotdot_history", "WriteHistoryBatch", _named("WriteHistoryBatch", schema=".."), words=["schema name", "not allowed"], category="names")
case("name_table_traversal_create", "CreateTable", _named("CreateTable", name="../../escape"), words=["table name", "path separator"], category="names")
case("name_schema_slash_create", "CreateTable", _named("CreateTable", schema="a/b"), words=["schema name", "path separator"], category="names")
case("name_table_backslash_alter", "AlterTable", _named("AlterTable", name="a\\b"), words=["table name", "path separator"], category="names")
case("name_table_nul_alter", "AlterTable", _named("AlterTable", name="tar\x00get"), words=["table name", "control character"], category="names")
case("name_schema_nul_truncate", "Truncate", _named("Truncate", schema="host\x00ile"), words=["schema name", "control character"], category="names")
case("name_table_1100_chars_truncate", "Truncate", _named("Truncate", name="x" * 1100), words=["table name", "1024 characters"], category="names")
case("name_table_multibyte_too_long_create", "CreateTable", _named("CreateTable", name="é" * 1025), words=["table name", "1024 characters"], category="names")
case("name_schema_dot_describe", "DescribeTable", _named("DescribeTable", schema="."), words=["schema name", "not allowed"], category="names")
case("name_table_empty_describe", "DescribeTable", _named("DescribeTable", name=""), words=["table name is empty"], category="names")
case("name_schema_empty_write", "WriteBatch", _named("WriteBatch", schema=""), words=["schema name is empty"], category="names")


def _create_cols(*cols):
    return lambda c: pb.CreateTableRequest(schema_name=SCHEMA, table=table("newt", *cols), configuration=CONFIG)


case("column_name_nul_create", "CreateTable", _create_cols(col("id", "INT", pk=True), col("a\x00b", "STRING")),
     words=["column name", "control character"], category="names")
case("column_name_empty_create", "CreateTable", _create_cols(col("id", "INT", pk=True), col("", "STRING")),
     words=["column name is empty"], category="names")
case("column_names_differ_only_in_case", "CreateTable", _create_cols(col("id", "INT", pk=True), col("ID", "STRING")),
     words=["'id' and 'ID' differ only in case"], category="names")
case("create_without_columns", "CreateTable", _create_cols(), words=["no columns"], category="missing")
case("decimal_precision_39_create", "CreateTable", _create_cols(col("id", "INT", pk=True), col("x", "DECIMAL", precision=39, scale=2)),
     words=["DECIMAL(39,2)"], category="values")
case("decimal_scale_above_precision_alter", "AlterTable",
     lambda c: pb.AlterTableRequest(schema_name=SCHEMA, table=table("target", *LIVE.columns, col("x", "DECIMAL", precision=5, scale=6)),
                                    configuration=CONFIG),
     words=["DECIMAL(5,6)"], category="values")

# ---- unknown enum values ----------------------------------------------------------------------


def _with_type(rpc, value):
    def build(c: Ctx):
        cols = list(LIVE.columns) + [common_pb2.Column(name="weird", type=value)]
        t = common_pb2.Table(name="target", columns=cols)
        if rpc == "WriteBatch":
            return c.wb(replace=[c.rows([live_row(9)])], tbl=t)
        if rpc == "AlterTable":
            return pb.AlterTableRequest(schema_name=SCHEMA, table=t, configuration=CONFIG)
        return pb.CreateTableRequest(schema_name=SCHEMA, table=common_pb2.Table(name="newt", columns=cols), configuration=CONFIG)
    return build


def _file_params(compression=None, encryption=None):
    def build(c: Ctx):
        req = c.wb(replace=[c.rows([live_row(9)])])
        if compression is not None:
            req.file_params.compression = compression
        if encryption is not None:
            req.file_params.encryption = encryption
        return req
    return build


def _history_compression(value):
    def build(c: Ctx):
        req = c.whb(replace=[c.rows([hist_row(9)], tbl=HIST)])
        req.file_params.compression = value
        return req
    return build


case("enum_datatype_99_write", "WriteBatch", _with_type("WriteBatch", 99), words=["column 'weird'", "unknown data type 99"], category="enums")
case("enum_datatype_99_alter", "AlterTable", _with_type("AlterTable", 99), words=["unknown data type 99"], category="enums")
case("enum_datatype_negative_create", "CreateTable", _with_type("CreateTable", -1), words=["unknown data type -1"], category="enums")
case("enum_compression_7", "WriteBatch", _file_params(compression=7), words=["unknown compression 7"], category="enums")
case("enum_compression_7_history", "WriteHistoryBatch", _history_compression(7), words=["unknown compression 7"], category="enums")
case("enum_encryption_5", "WriteBatch", _file_params(encryption=5), words=["unknown encryption 5"], category="enums")

# ---- missing table, columns, files ------------------------------------------------------------


def _no_table(c: Ctx):
    req = c.wb(replace=[c.rows([live_row(9)])])
    req.ClearField("table")
    return req


def _history_missing_column(kind, columns, row):
    def build(c: Ctx):
        f = c.rows([row], tbl=HIST, columns=columns, kind=kind)
        return c.whb(**{kind if kind != "earliest" else "earliest": [f]})
    return build


def _truncate(**kw):
    def build(c: Ctx):
        args = dict(schema_name=SCHEMA, table_name="target", synced_column="_fivetran_synced",
                    utc_delete_before=ts(T0 + dt.timedelta(days=1)), configuration=CONFIG)
        args.update(kw)
        return pb.TruncateRequest(**args)
    return build


def _history_same_start(c: Ctx):
    return c.whb(replace=[c.rows([hist_row(9, name="a"), hist_row(9, name="b")], tbl=HIST)])


case("write_without_table", "WriteBatch", _no_table, words=["no table name"], category="missing")
case("history_to_missing_table", "WriteHistoryBatch",
     lambda c: c.whb(replace=[c.rows([hist_row(9)], tbl=HIST)], tbl=table("no_such_table", *HIST.columns)),
     code=SC.NOT_FOUND, words=["does not exist"], category="missing")
case("history_batch_on_live_table", "WriteHistoryBatch",
     lambda c: c.whb(replace=[c.rows([live_row(9)])], tbl=LIVE), words=["not a history-mode table"], category="missing")
case("history_delete_without_end", "WriteHistoryBatch",
     _history_missing_column("delete", ["id", "_fivetran_synced"], {"id": 1, "_fivetran_synced": T0}),
     words=["column '_fivetran_end' is missing"], category="missing")
case("history_earliest_without_start", "WriteHistoryBatch",
     _history_missing_column("earliest", ["id", "name"], {"id": 1, "name": SECRET}),
     words=["column '_fivetran_start' is missing"], category="missing")
case("history_two_versions_same_start", "WriteHistoryBatch", _history_same_start, words=["same _fivetran_start"], category="missing")
case("delete_file_without_key_column", "WriteBatch",
     lambda c: c.wb(delete=[c.rows([{"str": SECRET, "_fivetran_synced": T0}], columns=["str", "_fivetran_synced"], kind="delete")]),
     words=["key column 'id' is missing"], category="missing")
case("truncate_without_table_name", "Truncate", _truncate(table_name=""), words=["table name"], category="missing")
case("truncate_unknown_synced_column_empty", "Truncate", _truncate(synced_column=""), words=["synced column"], category="missing")
case("truncate_soft_without_deleted_column", "Truncate", _truncate(soft=pb.SoftTruncate(deleted_column="")),
     words=["deleted_column"], category="missing")
case("truncate_soft_column_not_boolean", "Truncate", _truncate(soft=pb.SoftTruncate(deleted_column="str")),
     words=["soft-delete column 'str'", "boolean"], category="missing")
case("truncate_soft_column_missing", "Truncate", _truncate(soft=pb.SoftTruncate(deleted_column="gone")),
     words=["soft-delete column 'gone'"], category="missing")
# A batch file that cannot be opened: a typed error naming the file, not "unexpected FileNotFoundError".
UNREADABLE = (SC.INVALID_ARGUMENT, SC.NOT_FOUND, SC.FAILED_PRECONDITION, TASK)
case("batch_file_does_not_exist", "WriteBatch",
     lambda c: c.wb(replace=[(str(c.files / "never-written.csv.zst.aes"), new_key())]),
     code=UNREADABLE, words=["never-written.csv.zst.aes"], category="missing")
case("batch_file_is_a_directory", "WriteBatch", lambda c: c.wb(replace=[(str(c.files), new_key())]),
     code=UNREADABLE, words=["files"], category="missing")
case("configuration_bad_spark_remote", "DescribeTable",
     lambda c: pb.DescribeTableRequest(schema_name=SCHEMA, table_name="target",
                                       configuration={**CONFIG, "spark_remote": "http://" + SECRET_TOKEN}),
     words=["spark_remote"], category="missing")

# ---- Migrate -------------------------------------------------------------------------------------


def _migrate(table_name="target", **op):
    def build(c: Ctx):
        d = pb.MigrationDetails(schema=SCHEMA, table=table_name)
        for k, v in op.items():
            getattr(d, k).CopyFrom(v)
        return pb.MigrateRequest(details=d, configuration=CONFIG)
    return build


case("migrate_without_operation", "Migrate", _migrate(), words=["no operation"], category="migrate")
case("migrate_unknown_sync_mode_99", "Migrate",
     _migrate(table_sync_mode_migration=pb.TableSyncModeMigrationOperation(type=99)),
     words=["unknown table sync mode migration 99"], category="enums")
case("migrate_add_column_datatype_99", "Migrate",
     _migrate(add=pb.AddOperation(add_column_with_default_value=pb.AddColumnWithDefaultValue(
         column="c", column_type=99, default_value="x"))), words=["unknown data type 99"], category="enums")
case("migrate_rename_table_to_dotdot", "Migrate",
     _migrate(rename=pb.RenameOperation(rename_table=pb.RenameTable(from_table="target", to_table=".."))),
     words=["table name", "not allowed"], category="names")
case("migrate_copy_table_to_path", "Migrate",
     _migrate(copy=pb.CopyOperation(copy_table=pb.CopyTable(from_table="target", to_table="../../x"))),
     words=["table name", "path separator"], category="names")
case("migrate_rename_column_to_nul", "Migrate",
     _migrate(rename=pb.RenameOperation(rename_column=pb.RenameColumn(from_column="str", to_column="a\x00b"))),
     words=["control character"], category="names")
case("migrate_update_value_out_of_range", "Migrate",
     _migrate(update_column_value=pb.UpdateColumnValueOperation(column="s", value="70000")),
     words=["'s'", "SHORT"], not_in=("70000",), category="values")
case("migrate_default_value_bad_date", "Migrate",
     _migrate(add=pb.AddOperation(add_column_with_default_value=pb.AddColumnWithDefaultValue(
         column="newd", column_type=8, default_value="2024-02-30"))),
     words=["'newd'", "NAIVE_DATE"], not_in=("2024-02-30",), category="values")
case("migrate_history_bad_operation_timestamp", "Migrate",
     _migrate(table_name="hist", drop=pb.DropOperation(drop_column_in_history_mode=pb.DropColumnInHistoryMode(
         column="name", operation_timestamp="yesterday"))), words=["operation_timestamp"], category="values")
case("migrate_update_missing_column", "Migrate",
     _migrate(update_column_value=pb.UpdateColumnValueOperation(column="gone", value="x")),
     words=["'gone'"], category="missing")
case("migrate_missing_table", "Migrate",
     _migrate(table_name="no_such_table", update_column_value=pb.UpdateColumnValueOperation(column="str", value="x")),
     code=SC.NOT_FOUND, words=["does not exist"], category="missing")

# ---- an engine-side failure: values that cannot take the new type ------------------------------

# The engine's own message quotes the value (CAST_INVALID_INPUT): the server must not pass it on,
# but its message should still say which column cannot take the new type.
case("alter_string_to_int_with_text_values", "AlterTable",
     lambda c: pb.AlterTableRequest(schema_name=SCHEMA, configuration=CONFIG, table=table(
         "target", *[x if x.name != "str" else col("str", "INT") for x in LIVE.columns])),
     code=(SC.INVALID_ARGUMENT, SC.FAILED_PRECONDITION, SC.INTERNAL, TASK), words=["'str'"], category="engine")

# ---- Parquet batch files (a server answering PARQUET in Capabilities) --------------------------


def _pq(make):
    def build(c: Ctx):
        return c.wb(replace=[make(c)], compression=Compression.OFF)
    return build


def _pq_valid_bytes(rows_tbl) -> bytes:
    import io
    import pyarrow.parquet as pq
    buf = io.BytesIO()
    pq.write_table(rows_tbl, buf)
    return buf.getvalue()


def _pq_truncated(c: Ctx):
    import pyarrow as pa
    data = _pq_valid_bytes(pa.table({"id": pa.array([1, 2], pa.int32()), "str": [SECRET, SECRET]}))
    return c.raw(data[: len(data) // 2], compression=Compression.OFF)


def _pq_wrong_type(c: Ctx):
    import pyarrow as pa
    return c.raw(_pq_valid_bytes(pa.table({"id": pa.array([1.5], pa.float64()), "str": [SECRET]})), compression=Compression.OFF)


def _pq_int_overflow(c: Ctx):
    import pyarrow as pa
    return c.raw(_pq_valid_bytes(pa.table({"id": pa.array([1], pa.int32()), "s": pa.array([70000], pa.int32()),
                                            "str": [SECRET]})), compression=Compression.OFF)


case("parquet_random_bytes", "WriteBatch", _pq(lambda c: c.raw(os.urandom(4096), compression=Compression.OFF)),
     words=["not a readable parquet"], category="parquet", server="parquet")
case("parquet_csv_content", "WriteBatch", _pq(lambda c: c.csv(f"{HEADER}\n{GOOD}\n", compression=Compression.OFF)),
     words=["not a readable parquet"], category="parquet", server="parquet")
case("parquet_truncated", "WriteBatch", _pq(_pq_truncated), words=["not a readable parquet"], category="parquet", server="parquet")
case("parquet_double_for_int_key", "WriteBatch", _pq(_pq_wrong_type), words=["column 'id'", "cannot be read as int"],
     category="parquet", server="parquet")
case("parquet_short_overflow", "WriteBatch", _pq(_pq_int_overflow), words=["column 's'", "row 1"],
     category="parquet", server="parquet")


# ----------------------------------------------------------------------------
# the test
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def envs(tmp_path_factory, dedicated_server):
    made: dict[str, Ctx] = {}

    def get(kind: str) -> Ctx:
        if kind not in made:
            base = tmp_path_factory.mktemp(f"hostile_{kind}")
            ctx = Ctx(dedicated_server, base, extra_args=("--batch-file-format", "parquet") if kind == "parquet" else ())
            ctx.setup_tables(parquet=(kind == "parquet"))
            made[kind] = ctx
        return made[kind]

    yield get
    for ctx in made.values():
        text = ctx.srv.log_text()
        ctx.srv.stop()
        assert SECRET not in text and SECRET_TOKEN not in text


def _secrets_in(text: str) -> list[str]:
    return [s for s in ("SECRET-",) if s in text]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input(envs, case: Case):
    ctx = envs(case.server)
    req = case.build(ctx)
    call = getattr(ctx.stub, case.rpc)
    tables_before, listing_before = ctx.table_states(), ctx.listing()
    log_mark = len(ctx.srv.log_text())
    if case.code is None:
        resp = call(req, timeout=120)
        case.check(ctx, resp)
    else:
        allowed = case.code if isinstance(case.code, tuple) else (case.code,)
        try:
            resp = call(req, timeout=120)
        except grpc.RpcError as err:
            got, details = err.code(), err.details() or ""
        else:
            task = resp.task.message if resp.HasField("task") else None
            got, details = (TASK, task) if task is not None else (f"success: {resp}", "")
        assert got in allowed, (got, details)
        for w in case.words:
            assert w.lower() in details.lower(), f"the message should name the problem ({w!r}): {details!r}"
        assert not _secrets_in(details), f"the message quotes a planted value: {details!r}"
        for v in case.not_in:
            assert v not in details, f"the message quotes the bad value {v!r}: {details!r}"
        assert len(details) < 500, details
    if case.code is not None or case.unchanged:
        assert ctx.table_states() == tables_before, "a table changed"
        assert ctx.listing() == listing_before, "the warehouse changed"
    new_log = ctx.srv.log_text()[log_mark:]
    assert not _secrets_in(new_log), f"the log quotes a planted value: {new_log[-2000:]!r}"
    assert ctx.srv.proc.poll() is None, "the server died"


def test_corpus_size(request):
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 40
    figures = {"cases": len(CASES), "rejected": sum(c.code is not None for c in CASES),
               "accepted_by_design": sum(c.code is None for c in CASES),
               "by_category": dict(Counter(c.category for c in CASES)), "by_rpc": dict(Counter(c.rpc for c in CASES))}
    request.config.cache.set("reliability/hostile", figures)
    print(f"\nhostile-input corpus: {figures}")
