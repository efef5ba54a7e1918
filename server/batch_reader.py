"""Reads one Fivetran batch file into typed Arrow.

Pipeline: file -> AES-256-CBC decrypt (stream) -> zstd/gzip decompress (stream)
-> CSV parse (pyarrow streaming reader, every column as text) -> vectorised
per-type conversion with pyarrow.compute.  Decrypted data never touches the disk
and, for CSV, is never held whole in memory (Parquet needs random access, so a
decrypted Parquet file is held in memory, never on disk).

Every error raised here is one of the typed errors in server.errors, and the
messages name the file (basename), the column and the 1-based data row only --
never a cell value, a key or a library message that could quote file contents.

Choices for cases the protocol leaves open (tests in tests/test_batch_reader.py):
- A UTF-8 BOM at the very start of a CSV file is stripped.
- FLOAT/DOUBLE text is parsed with IEEE round-to-nearest, exactly like Java's
  Float/Double.parseFloat: `NaN`, `Infinity`, `-Infinity` (Java's spellings,
  which Arrow accepts as is, as well as `inf`/`nan`), and a finite value beyond
  the type's range (e.g. FLOAT `3.4028237E+38`) becomes +-Infinity.
- DECIMAL values are never rounded: more fractional digits than the scale
  (after dropping trailing zeros) or more integer digits than precision-scale
  -> ValueConversionError.  Exponent notation (`1.2E+22`) is accepted.
- UTC_DATETIME / NAIVE_DATETIME accept 0-9 fractional digits; digits beyond
  microseconds are truncated (Spark timestamps are microseconds).  A
  UTC_DATETIME without an offset is read as UTC.  Seconds may be omitted
  (`10:15`, as Java's toString writes them when zero).
- NAIVE_TIME `HH:MM` is accepted and stored as `HH:MM:00`.
- Dates/timestamps must fall in 0001-01-01 .. 9999-12-31 (Spark's range).
- An empty `unmodified_string` disables unmodified markers (proto3 cannot tell
  "unset" from "", and treating every empty cell as unmodified would silently
  drop updates); an empty `null_string` is honoured (empty cells are NULL).  If
  both markers are equal, NULL wins.
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import enum
import errno
import gzip
import io
import os
import re
import zlib
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import zstandard
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from . import errors
from .model import Column, FivetranType as FT, TableSchema
from .type_mapping import arrow_type

CHUNK = 1 << 20            # ciphertext / plaintext read size
ZSTD_IN_CHUNK = 128 << 10  # compressed bytes per decompress() call: bounds the output held at once
CSV_BLOCK = 16 << 20
_AES_BLOCK = 16


class Compression(enum.IntEnum):
    OFF = 0
    ZSTD = 1
    GZIP = 2


class Encryption(enum.IntEnum):
    NONE = 0
    AES = 1


class FileFormat(enum.Enum):
    CSV = "csv"
    PARQUET = "parquet"


@dataclass(frozen=True)
class FileParams:
    compression: Compression
    encryption: Encryption
    null_string: str
    unmodified_string: str
    file_format: FileFormat = FileFormat.CSV


@dataclass
class BatchData:
    values: pa.Table
    unmodified: Optional[pa.Table]
    num_rows: int


# ----------------------------------------------------------------------------
# Byte streams: decrypt, decompress
# ----------------------------------------------------------------------------


class _BufferedRaw(io.RawIOBase):
    """Base for chunk-producing raw streams: subclasses implement _produce()."""

    def __init__(self):
        super().__init__()
        self._out = b""
        self._pos = 0
        self._done = False

    def readable(self) -> bool:
        return True

    def _produce(self) -> bytes:  # returns b"" only at the end
        raise NotImplementedError

    def readinto(self, b) -> int:
        while self._pos >= len(self._out):
            if self._done:
                return 0
            self._out = self._produce()
            self._pos = 0
            if not self._out:
                self._done = True
                return 0
        n = min(len(b), len(self._out) - self._pos)
        memoryview(b)[:n] = memoryview(self._out)[self._pos:self._pos + n]
        self._pos += n
        return n


class _AesCbcReader(_BufferedRaw):
    """AES-256-CBC decryption as a stream, so plaintext never needs a disk file.

    The PKCS7 unpadder holds back the last block until finalize(), so padding
    is checked for real (a wrong key almost always shows up as bad padding).
    """

    def __init__(self, f, key: bytes, name: str):
        super().__init__()
        self._f = f
        self._name = name
        size = os.fstat(f.fileno()).st_size
        if size < 2 * _AES_BLOCK or (size - _AES_BLOCK) % _AES_BLOCK:
            raise errors.DecryptionError(
                f"file {name}: ciphertext is truncated or corrupt (length is not IV + whole AES blocks)")
        iv = _read_exact(f, _AES_BLOCK)
        if len(iv) != _AES_BLOCK:
            raise errors.DecryptionError(f"file {name}: ciphertext is truncated or corrupt (no IV)")
        self._dec = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
        self._unpad = padding.PKCS7(128).unpadder()

    def _produce(self) -> bytes:
        while not self._done:
            chunk = self._f.read(CHUNK)
            if chunk:
                out = self._unpad.update(self._dec.update(chunk))
                if out:
                    return out
                continue
            try:
                out = self._unpad.update(self._dec.finalize()) + self._unpad.finalize()
            except ValueError:
                raise errors.DecryptionError(
                    f"file {self._name}: decryption failed (bad padding: wrong key or corrupt file)") from None
            self._done = True
            return out
        return b""

    def close(self):
        if not self.closed:
            self._f.close()
        super().close()


class _ZstdReader(_BufferedRaw):
    """zstd stream decompression that notices truncation.

    zstandard's stream_reader silently stops at a truncated frame, so frames are
    decoded with decompressobj (one per frame, for multi-frame files) and the
    last frame must have reached its end.
    """

    def __init__(self, src, name: str):
        super().__init__()
        self._src = src
        self._name = name
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._fed = 0        # compressed bytes fed to the current frame's object
        self._total = 0

    def _feed(self, data: bytes) -> bytes:
        out = []
        while data:
            try:
                out.append(self._obj.decompress(data))
            except zstandard.ZstdError:
                raise errors.DecompressionError(f"file {self._name}: corrupt zstd data") from None
            self._fed += len(data)
            if self._obj.eof:
                data = self._obj.unused_data
                self._obj = self._dctx.decompressobj()
                self._fed = 0
            else:
                data = b""
        return b"".join(out)

    def _produce(self) -> bytes:
        while True:
            chunk = self._src.read(ZSTD_IN_CHUNK)
            if not chunk:
                if self._total == 0:
                    raise errors.DecompressionError(f"file {self._name}: empty zstd stream (no frame)")
                if self._fed:
                    raise errors.DecompressionError(
                        f"file {self._name}: zstd stream is truncated (ends inside a frame)")
                return b""
            self._total += len(chunk)
            out = self._feed(chunk)
            if out:
                return out

    def close(self):
        if not self.closed:
            self._src.close()
        super().close()


class _GzipReader(io.RawIOBase):
    """gzip.GzipFile with its exceptions turned into DecompressionError."""

    def __init__(self, src: io.BufferedReader, name: str):
        super().__init__()
        self._src = src
        self._name = name
        if not src.peek(1):
            raise errors.DecompressionError(f"file {name}: empty gzip stream")
        self._gz = gzip.GzipFile(fileobj=src, mode="rb")

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            return self._gz.readinto(b)
        except EOFError:
            raise errors.DecompressionError(f"file {self._name}: gzip stream is truncated") from None
        except (gzip.BadGzipFile, zlib.error):
            raise errors.DecompressionError(f"file {self._name}: corrupt gzip data") from None

    def close(self):
        if not self.closed:
            self._gz.close()
            self._src.close()
        super().close()


def _read_exact(f, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        b = f.read(n - got)
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def open_plaintext(path: str, key: Optional[bytes], params: FileParams) -> io.BufferedIOBase:
    """Decrypt + decompress as a stream (the caller closes it)."""
    name = os.path.basename(path)
    enc = Encryption(params.encryption)
    comp = Compression(params.compression)
    if enc == Encryption.AES:
        if key is None:
            raise errors.MissingKey(f"file {name}: the batch is AES-encrypted but no key was given for it")
        if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
            raise errors.DecryptionError(f"file {name}: the AES key must be 32 bytes (AES-256)")
    try:
        f = open(path, "rb", buffering=0)
    except OSError as exc:
        reason = {errno.ENOENT: "does not exist", errno.EISDIR: "is a directory", errno.EACCES: "is not readable"}.get(
            exc.errno, "cannot be opened")
        raise errors.BatchFileError(f"batch file {name} {reason}") from None
    try:
        raw: io.RawIOBase = _AesCbcReader(f, bytes(key), name) if enc == Encryption.AES else f
        src = io.BufferedReader(raw, CHUNK)
        if comp == Compression.OFF:
            return src
        if comp == Compression.ZSTD:
            dec: io.RawIOBase = _ZstdReader(src, name)
        else:
            dec = _GzipReader(src, name)
        return io.BufferedReader(dec, CHUNK)
    except BaseException:
        f.close()
        raise


# ----------------------------------------------------------------------------
# CSV
# ----------------------------------------------------------------------------

_BOM = b"\xef\xbb\xbf"


class _CsvSource(_BufferedRaw):
    """The plaintext as pyarrow sees it.

    Strips a leading BOM, ends the file with a newline if it lacks one (so a
    header-only file without a final newline still parses), and counts quote
    characters: pyarrow accepts an unterminated quote silently (the value runs
    to EOF), but in a well-formed file quotes come in pairs.
    """

    def __init__(self, src, name: str):
        super().__init__()
        self._src = src
        self._first = True
        self._last = b"\n"
        self.quotes = 0
        self.at_eof = False
        first = self._produce()
        if not first:
            raise errors.CsvFormatError(f"file {name}: empty file: no header")
        self._out = first

    def _produce(self) -> bytes:
        if self.at_eof:
            return b""
        data = self._src.read(CHUNK)
        if self._first:
            self._first = False
            if data.startswith(_BOM):
                data = data[len(_BOM):]
                if not data:
                    data = self._src.read(CHUNK)
        if not data:
            self.at_eof = True
            return b"\n" if self._last not in (b"\n", b"\r") else b""
        self.quotes += data.count(b'"')
        self._last = data[-1:]
        return data

    def close(self):
        if not self.closed:
            self._src.close()
        super().close()


_FIELDS_RE = re.compile(r"Expected (\d+) columns, got (\d+)")


def _csv_error(name: str, exc: Exception) -> errors.CsvFormatError:
    """Classify a pyarrow CSV error without quoting it (its text can contain row contents)."""
    msg = str(exc)
    m = _FIELDS_RE.search(msg)
    if m:
        what = f"wrong number of fields (expected {m.group(1)}, got {m.group(2)})"
    elif "UTF8" in msg or "UTF-8" in msg:
        what = "invalid UTF-8"
    elif "Empty CSV" in msg:
        what = "empty file: no header"
    elif "straddl" in msg:
        what = f"a row longer than the {CSV_BLOCK >> 20} MiB parse block"
    else:
        what = "unreadable CSV"
    return errors.CsvFormatError(f"malformed CSV in file {name}: {what}")


def _unterminated(name: str) -> errors.CsvFormatError:
    return errors.CsvFormatError(f"malformed CSV in file {name}: unterminated quote")


def _check_header(name: str, header: list[str], table: TableSchema, what: str = "CSV") -> None:
    if any(h == "" for h in header):
        raise errors.CsvFormatError(f"malformed {what} in file {name}: empty column name in header")
    seen = set()
    for h in header:
        if h in seen:
            raise errors.CsvFormatError(f"malformed {what} in file {name}: duplicate column {h!r} in header")
        seen.add(h)
    for h in header:
        if not table.has(h):
            raise errors.SchemaMismatch(f"file {name}: column {h!r} is not in table {table.name!r}")


def _read_csv(path: str, key, params: FileParams, table: TableSchema, allow_unmodified: bool) -> BatchData:
    name = os.path.basename(path)
    plain = open_plaintext(path, key, params)
    try:
        src = _CsvSource(plain, name)
        stream = io.BufferedReader(src, CHUNK)
        try:
            reader = pcsv.open_csv(
                stream,
                read_options=pcsv.ReadOptions(block_size=CSV_BLOCK, use_threads=True),
                parse_options=pcsv.ParseOptions(
                    delimiter=",", quote_char='"', double_quote=True, escape_char=False,
                    newlines_in_values=True, ignore_empty_lines=True),
                convert_options=pcsv.ConvertOptions(
                    column_types={c.name: pa.string() for c in table.columns},
                    strings_can_be_null=False, quoted_strings_can_be_null=False,
                    null_values=[], check_utf8=True),
            )
            header = reader.schema.names
        except pa.ArrowInvalid as e:
            if src.at_eof and src.quotes % 2:
                raise _unterminated(name) from None
            raise _csv_error(name, e) from None
        except UnicodeDecodeError:  # pyarrow decodes header names itself
            raise errors.CsvFormatError(f"malformed CSV in file {name}: invalid UTF-8 in header") from None
        _check_header(name, header, table)
        conv = _Converter(name, table, header, params, allow_unmodified)
        try:
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                except pa.ArrowInvalid as e:
                    if src.at_eof and src.quotes % 2:
                        raise _unterminated(name) from None
                    raise _csv_error(name, e) from None
                conv.add(batch)
        except errors.ValueConversionError:
            # A value swallowed by an unterminated quote usually fails conversion first.
            if src.at_eof and src.quotes % 2:
                raise _unterminated(name) from None
            raise
        if src.quotes % 2:
            raise _unterminated(name)
        return conv.result()
    finally:
        plain.close()


# ----------------------------------------------------------------------------
# Value conversion (vectorised)
# ----------------------------------------------------------------------------

_BOOL_VALUES = pa.array(["true", "false"])
_B64_RE = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
_TIME_RE = r"^(?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d{1,9})?)?$"
_INT_RE = r"^-?\d+$"  # Arrow alone would also take "0x10" as 16
_DATE_RE = r"^\d{4}-\d{2}-\d{2}$"
_NAIVE_TS_RE = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?$"
_UTC_TS_RE = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?$"
# What Fivetran writes: an offset and at most microseconds, so Arrow can cast it as is.
_NAIVE_TS_FAST_RE = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?$"
_UTC_TS_FAST_RE = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:?\d{2})$"
_DEC_PLAIN_RE = r"^[+-]?(?:\d+\.?\d*|\.\d+)$"
_DEC_EXP_RE = r"^[+-]?(?:\d+\.?\d*|\.\d+)[eE][+-]?\d+$"

_EPOCH = _dt.date(1970, 1, 1)
_MIN_DAY = (_dt.date(1, 1, 1) - _EPOCH).days
_MAX_DAY = (_dt.date(9999, 12, 31) - _EPOCH).days
_MIN_US = _MIN_DAY * 86_400_000_000
_MAX_US = (_MAX_DAY + 1) * 86_400_000_000 - 1

_REASONS = {
    FT.BOOLEAN: "expected true or false",
    FT.SHORT: "not an integer, or out of range for SHORT",
    FT.INT: "not an integer, or out of range for INT",
    FT.LONG: "not an integer, or out of range for LONG",
    FT.FLOAT: "not a floating-point number",
    FT.DOUBLE: "not a floating-point number",
    FT.NAIVE_DATE: "expected a valid date YYYY-MM-DD in 0001-01-01..9999-12-31",
    FT.NAIVE_DATETIME: "expected a valid YYYY-MM-DDTHH:MM:SS[.fffffffff] in years 0001..9999",
    FT.UTC_DATETIME: "expected a valid YYYY-MM-DDTHH:MM:SS[.fffffffff] with Z or +-HH:MM, in years 0001..9999",
    FT.NAIVE_TIME: "expected HH:MM:SS[.fffffffff]",
    FT.BINARY: "not valid base64",
}


class _ConversionFailed(Exception):
    """Internal: index (0-based, within the array) and reason of the first bad value."""

    def __init__(self, index: int, reason: str):
        self.index = index
        self.reason = reason


def _first_true(mask: pa.Array) -> int:
    """Index of the first True in a bool array (nulls count as False), or -1."""
    return pc.index(mask, True).as_py()


def _fail_first_false(ok: pa.Array, reason: str) -> None:
    i = _first_true(pc.invert(ok.fill_null(True)))
    if i >= 0:
        raise _ConversionFailed(i, reason)


def _checked_cast(arr: pa.Array, fn: Callable[[pa.Array], pa.Array], reason: str) -> pa.Array:
    """Run a whole-array conversion; when it fails, bisect for the first bad row
    (about one more pass over the data) so the error can name the row."""
    try:
        return fn(arr)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
        pass
    lo, hi = 0, len(arr)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            fn(arr.slice(lo, mid - lo))
            lo = mid
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
            hi = mid
    raise _ConversionFailed(lo, reason)


def _stages(arr: pa.Array, *stages: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """Run conversion stages, reporting the earliest bad row over all of them.

    Each stage raises _ConversionFailed with the first bad index of what it is
    given; later stages then only see the rows before it (converted by that
    stage), so a later stage can only report an earlier row, and the last
    failure recorded is the first one.
    """
    failed: Optional[_ConversionFailed] = None
    for stage in stages:
        try:
            arr = stage(arr)
        except _ConversionFailed as e:
            failed = e
            arr = stage(arr.slice(0, e.index))  # the rows before the first bad one pass
    if failed is not None:
        raise failed
    return arr


def _check(pattern: str, reason: str) -> Callable[[pa.Array], pa.Array]:
    """A stage that requires every non-null value to match a regex."""
    def stage(arr: pa.Array) -> pa.Array:
        _fail_first_false(pc.match_substring_regex(arr, pattern), reason)
        return arr
    return stage


def _sub(pattern: str, replacement: str) -> Callable[[pa.Array], pa.Array]:
    return lambda arr: pc.replace_substring_regex(arr, pattern, replacement)


def _cast_to(target: pa.DataType, reason: str) -> Callable[[pa.Array], pa.Array]:
    return lambda arr: _checked_cast(arr, lambda a: pc.cast(a, target), reason)


def _in_range(lo: int, hi: int, as_type: pa.DataType, reason: str) -> Callable[[pa.Array], pa.Array]:
    def stage(arr: pa.Array) -> pa.Array:
        _check_range(arr, lo, hi, as_type, reason)
        return arr
    return stage


def _string_data(arr: pa.Array) -> memoryview:
    """The concatenated UTF-8 bytes of a string array without nulls (zero copy)."""
    bufs = arr.buffers()
    if len(arr) == 0 or bufs[2] is None:
        return memoryview(b"")
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[arr.offset: arr.offset + len(arr) + 1]
    return memoryview(bufs[2])[int(offsets[0]):int(offsets[-1])]


def _decode_base64(arr: pa.Array) -> pa.Array:
    """Decode a whole batch of base64 values in one b64decode call.

    Padding '=' is replaced by 'A' so every value decodes to exactly len*3/4
    bytes and the concatenation is one valid base64 text; the 1-2 filler bytes
    at the end of each padded value are then dropped with a numpy mask.
    """
    n = len(arr)
    valid = arr.is_valid()
    nonnull = arr.drop_null()
    if len(nonnull) and not isinstance(nonnull, pa.StringArray):
        nonnull = nonnull.cast(pa.string())
    lens = pc.binary_length(nonnull).to_numpy(zero_copy_only=False).astype(np.int64)
    pads = pc.count_substring(nonnull, "=").to_numpy(zero_copy_only=False).astype(np.int64)
    filled = pc.replace_substring(nonnull, "=", "A")
    decoded = np.frombuffer(base64.b64decode(_string_data(filled)), dtype=np.uint8)
    full = lens // 4 * 3
    ends = np.cumsum(full)
    if pads.any():
        keep = np.ones(len(decoded), dtype=bool)
        keep[ends[pads >= 1] - 1] = False
        keep[ends[pads == 2] - 2] = False
        decoded = decoded[keep]
    real = full - pads
    null_count = n - len(nonnull)
    if null_count:
        valid_np = valid.to_numpy(zero_copy_only=False)
        real_all = np.zeros(n, dtype=np.int64)
        real_all[valid_np] = real
        validity = pa.array(valid_np, pa.bool_()).buffers()[1]
    else:
        real_all, validity = real, None
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(real_all, out=offsets[1:])
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                      pa.py_buffer(decoded.tobytes())], null_count)
    big = pa.Array.from_buffers(pa.large_binary(), n, [validity, pa.py_buffer(offsets),
                                                       pa.py_buffer(decoded.tobytes())], null_count)
    return big.cast(pa.binary())  # raises (offset overflow) rather than corrupting


def _bool(arr: pa.Array) -> pa.Array:
    low = pc.ascii_lower(arr)
    _fail_first_false(pc.or_(pc.is_in(low, value_set=_BOOL_VALUES), low.is_null()), _REASONS[FT.BOOLEAN])
    return pc.equal(low, "true")


def _decimal_plain(text: str, p: int, s: int) -> str:
    """Exponent-notation decimals (rare) are normalised per value with Python's
    exact decimal module: Arrow's own parsing silently wraps past 38 digits."""
    d = decimal.Decimal(text)
    sign, digits, exp = d.as_tuple()
    digits = list(digits)
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop()
        exp += 1
    if digits == [0]:
        return "0"
    if exp < -s:
        raise _ConversionFailed(0, f"more fractional digits than scale {s} (values are never rounded)")
    if len(digits) + exp > p - s:
        raise _ConversionFailed(0, f"too many integer digits for DECIMAL({p},{s})")
    ds = "".join(map(str, digits))
    if exp >= 0:
        out = ds + "0" * exp
    else:
        ip = ds[:exp] or "0"
        fp = ds[exp:].rjust(-exp, "0")
        out = f"{ip}.{fp}"
    return ("-" if sign else "") + out


def _decimal_fast_re(p: int, s: int) -> str:
    """Plain decimals that fit DECIMAL(p,s) with at most p digits in all: Arrow parses these exactly."""
    ip = rf"\d{{1,{p - s}}}" if p > s else "0"
    fp = rf"(?:\.\d{{1,{s}}})?" if s else ""
    return rf"^-?{ip}{fp}$"


def _decimal(arr: pa.Array, col: Column) -> pa.Array:
    p, s = col.decimal_params()
    if not (1 <= p <= 38 and 0 <= s <= p):
        raise errors.SchemaMismatch(f"column {col.name!r}: DECIMAL({p},{s}) cannot be stored")
    target = pa.decimal128(p, s)
    if _all_match(arr, _decimal_fast_re(p, s)):
        return _checked_cast(arr, lambda a: pc.cast(a, target), "not a decimal number")
    plain = pc.match_substring_regex(arr, _DEC_PLAIN_RE).fill_null(False)
    exp = pc.match_substring_regex(arr, _DEC_EXP_RE).fill_null(False)
    bad_syntax = pc.and_(arr.is_valid(), pc.invert(pc.or_(plain, exp)))
    fits_int = pc.match_substring_regex(arr, rf"^[+-]?0*\d{{0,{p - s}}}(?:\.\d*)?$").fill_null(True)
    fits_frac = pc.match_substring_regex(arr, rf"^[+-]?\d*(?:\.\d{{0,{s}}}0*)?$").fill_null(True)
    checks = [
        (bad_syntax, "not a decimal number"),
        (pc.and_(plain, pc.invert(fits_int)), f"too many integer digits for DECIMAL({p},{s})"),
        (pc.and_(plain, pc.invert(fits_frac)), f"more fractional digits than scale {s} (values are never rounded)"),
    ]
    first, reason = -1, ""
    for mask, why in checks:
        i = _first_true(mask)
        if i >= 0 and (first < 0 or i < first):
            first, reason = i, why
    if pc.any(exp).as_py():
        idx = np.flatnonzero(exp.to_numpy(zero_copy_only=False))
        texts = arr.filter(exp).to_pylist()
        repl = []
        for i, t in zip(idx, texts):
            if first >= 0 and i > first:
                break
            try:
                repl.append(_decimal_plain(t, p, s))
            except _ConversionFailed as e:
                first, reason = int(i), e.reason
                break
            except decimal.InvalidOperation:
                first, reason = int(i), "not a decimal number"
                break
        if first < 0:
            arr = pc.replace_with_mask(arr, exp, pa.array(repl, pa.string()))
    if first >= 0:
        raise _ConversionFailed(first, reason)
    # Drop leading zeros and trailing fractional zeros so Arrow never sees more than p digits
    # (its parser silently wraps past 38).
    arr = pc.replace_substring_regex(arr, r"^([+-]?)0+(\d)", r"\1\2")
    arr = pc.replace_substring_regex(arr, r"^([+-]?\d*\.\d*?)0+$", r"\1")
    return _checked_cast(arr, lambda a: pc.cast(a, target), "not a decimal number")


def _check_range(typed: pa.Array, lo: int, hi: int, as_type: pa.DataType, reason: str) -> None:
    ints = typed.view(as_type) if typed.offset == 0 else pc.cast(typed, as_type)
    out = pc.or_(pc.less(ints, lo), pc.greater(ints, hi))
    i = _first_true(out)
    if i >= 0:
        raise _ConversionFailed(i, reason)


def _date(arr: pa.Array) -> pa.Array:
    reason = _REASONS[FT.NAIVE_DATE]
    return _stages(arr, _check(_DATE_RE, reason), _cast_to(pa.date32(), reason),
                   _in_range(_MIN_DAY, _MAX_DAY, pa.int32(), reason))


def _all_match(arr: pa.Array, pattern: str) -> bool:
    return pc.all(pc.match_substring_regex(arr, pattern)).as_py() in (True, None)


def _timestamp(arr: pa.Array, ftype: FT) -> pa.Array:
    reason = _REASONS[ftype]
    if ftype == FT.UTC_DATETIME:
        target = pa.timestamp("us", tz="UTC")
        fast, full = _UTC_TS_FAST_RE, _UTC_TS_RE
        # No offset: read as UTC.
        fix = [_sub(r"^(\d{4}-\d{2}-\d{2}[T ][\d:.]+)$", r"\1Z")]
    else:
        target = pa.timestamp("us")
        fast, full = _NAIVE_TS_FAST_RE, _NAIVE_TS_RE
        fix = []
    cast = [_cast_to(target, reason), _in_range(_MIN_US, _MAX_US, pa.int64(), reason)]
    if _all_match(arr, fast):  # the usual form: nothing to rewrite
        return _stages(arr, *cast)
    # Spark timestamps are microseconds: digits past the 6th are truncated (not rounded).
    return _stages(arr, _check(full, reason), *fix, _sub(r"(\.\d{6})\d+", r"\1"), *cast)


def _time(arr: pa.Array) -> pa.Array:
    return _stages(arr, _check(_TIME_RE, _REASONS[FT.NAIVE_TIME]), _sub(r"^(\d{2}:\d{2})$", r"\1:00"))


def _convert_text(arr: pa.Array, col: Column) -> pa.Array:
    """Text (NULLs already applied) -> the column's Arrow type."""
    t = FT(col.type)
    if t in (FT.STRING, FT.JSON, FT.XML, FT.UNSPECIFIED):
        return arr
    if t == FT.BOOLEAN:
        return _bool(arr)
    if t in (FT.SHORT, FT.INT, FT.LONG):
        return _stages(arr, _check(_INT_RE, _REASONS[t]), _cast_to(arrow_type(col), _REASONS[t]))
    if t in (FT.FLOAT, FT.DOUBLE):
        return _stages(arr, _cast_to(arrow_type(col), _REASONS[t]))
    if t == FT.DECIMAL:
        return _decimal(arr, col)
    if t == FT.NAIVE_DATE:
        return _date(arr)
    if t in (FT.NAIVE_DATETIME, FT.UTC_DATETIME):
        return _timestamp(arr, t)
    if t == FT.NAIVE_TIME:
        return _time(arr)
    if t == FT.BINARY:
        return _stages(arr, _check(_B64_RE, _REASONS[FT.BINARY]), _decode_base64)
    raise errors.SchemaMismatch(f"column {col.name!r}: unsupported type {t.name}")


class _Converter:
    """Turns text record batches into typed ones and keeps them for one final Table."""

    def __init__(self, name: str, table: TableSchema, header: list[str], params: FileParams,
                 allow_unmodified: bool):
        self.name = name
        present = set(header)
        self.columns = [c for c in table.columns if c.name in present]
        self.null = params.null_string
        self.unmod = params.unmodified_string if (allow_unmodified and params.unmodified_string
                                                  and params.unmodified_string != params.null_string) else None
        self.allow_unmodified = allow_unmodified
        self.schema = pa.schema([pa.field(c.name, arrow_type(c)) for c in self.columns])
        self.unmod_schema = pa.schema([pa.field(c.name, pa.bool_()) for c in self.columns])
        self.values: list[pa.RecordBatch] = []
        self.unmods: list[pa.RecordBatch] = []
        self.any_unmod = False
        self.rows = 0

    def _fail(self, col: Column, index: int, reason: str) -> errors.ValueConversionError:
        ftype = FT(col.type).name
        if col.type == FT.DECIMAL:
            p, s = col.decimal_params()
            ftype = f"DECIMAL({p},{s})"
        return errors.ValueConversionError(
            f"file {self.name}: column {col.name!r} ({ftype}) row {self.rows + index + 1}: "
            f"value does not fit: {reason}")

    def column(self, col: Column, text: pa.Array) -> tuple[pa.Array, Optional[pa.Array]]:
        """Text cells (no nulls) -> (typed values, unmodified mask or None)."""
        if isinstance(text, pa.ChunkedArray):
            text = text.combine_chunks()
        if text.type != pa.string():
            text = text.cast(pa.string())
        null_mask = pc.equal(text, self.null)
        if text.null_count:
            null_mask = pc.or_kleene(null_mask, text.is_null())
        unmod_mask = None
        hide = null_mask
        if self.unmod is not None:
            unmod_mask = pc.equal(text, self.unmod).fill_null(False)
            hide = pc.or_(null_mask, unmod_mask)
        if pc.any(hide).as_py():
            text = pc.if_else(hide, pa.scalar(None, pa.string()), text)
        try:
            return _convert_text(text, col), unmod_mask
        except _ConversionFailed as e:
            raise self._fail(col, e.index, e.reason) from None

    def add_arrays(self, arrays: dict[str, tuple[pa.Array, Optional[pa.Array]]], n: int) -> None:
        vals = [arrays[c.name][0] for c in self.columns]
        self.values.append(pa.RecordBatch.from_arrays(vals, schema=self.schema))
        if self.allow_unmodified:
            masks = []
            for c in self.columns:
                m = arrays[c.name][1]
                if m is None:
                    m = pa.nulls(n, pa.bool_()).fill_null(False)
                elif not self.any_unmod and pc.any(m).as_py():
                    self.any_unmod = True
                masks.append(m)
            self.unmods.append(pa.RecordBatch.from_arrays(masks, schema=self.unmod_schema))
        self.rows += n

    def add(self, batch: pa.RecordBatch) -> None:
        arrays = {c.name: self.column(c, batch.column(c.name)) for c in self.columns}
        self.add_arrays(arrays, batch.num_rows)

    def result(self) -> BatchData:
        values = pa.Table.from_batches(self.values, schema=self.schema)
        unmod = None
        if self.allow_unmodified and self.any_unmod:
            unmod = pa.Table.from_batches(self.unmods, schema=self.unmod_schema)
        return BatchData(values=values, unmodified=unmod, num_rows=self.rows)


# ----------------------------------------------------------------------------
# Parquet
# ----------------------------------------------------------------------------


def _read_parquet(path: str, key, params: FileParams, table: TableSchema, allow_unmodified: bool) -> BatchData:
    """Parquet batches, as Fivetran writes them from Avro schemas.

    Unmodified markers in Parquet update files are not documented. The safe
    reading used here: in a column stored as *string*, a value equal to
    unmodified_string is "unmodified" (and one equal to null_string is NULL,
    as in CSV); a typed (non-string) column cannot hold a marker, so it has no
    unmodified cells and its Parquet NULL means NULL.
    """
    import pyarrow.parquet as pq

    name = os.path.basename(path)
    buf = io.BytesIO()
    plain = open_plaintext(path, key, params)
    try:
        while True:
            chunk = plain.read(CHUNK)
            if not chunk:
                break
            buf.write(chunk)
    finally:
        plain.close()
    buf.seek(0)
    try:
        data = pq.read_table(buf)
    except (pa.ArrowException, OSError, ValueError):
        raise errors.ParquetFormatError(f"file {name}: not a readable Parquet file") from None
    finally:
        del buf
    _check_header(name, data.schema.names, table, what="Parquet")
    conv = _Converter(name, table, data.schema.names, params, allow_unmodified)
    arrays = {}
    for col in conv.columns:
        arr = data.column(col.name).combine_chunks()
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
            arrays[col.name] = conv.column(col, arr)
            continue
        arrays[col.name] = (_cast_typed(conv, col, arr), None)
    conv.add_arrays(arrays, data.num_rows)
    return conv.result()


def _cast_typed(conv: _Converter, col: Column, arr: pa.Array) -> pa.Array:
    """A typed Parquet column -> the column's Arrow type, with overflow/precision checks."""
    target = arrow_type(col)
    src = arr.type
    compatible = (
        (pa.types.is_integer(src) and (pa.types.is_integer(target) or pa.types.is_decimal(target)
                                       or pa.types.is_floating(target)))
        or (pa.types.is_floating(src) and pa.types.is_floating(target))
        or (pa.types.is_decimal(src) and pa.types.is_decimal(target))
        or (pa.types.is_boolean(src) and pa.types.is_boolean(target))
        or ((pa.types.is_binary(src) or pa.types.is_large_binary(src) or pa.types.is_fixed_size_binary(src))
            and pa.types.is_binary(target))
        or (pa.types.is_date(src) and pa.types.is_date(target))
        or (pa.types.is_timestamp(src) and pa.types.is_timestamp(target))
    )
    if not compatible:
        raise errors.SchemaMismatch(
            f"file {conv.name}: column {col.name!r} is stored as {src} in the Parquet file, "
            f"which cannot be read as {FT(col.type).name}")
    if src == target:
        out = arr
    else:
        # Timestamps: sub-microsecond digits are truncated, as for CSV.
        opts = pc.CastOptions(target, allow_time_truncate=True)
        try:
            out = _checked_cast(arr, lambda a: pc.cast(a, options=opts),
                                _REASONS.get(FT(col.type), f"out of range for {FT(col.type).name}"))
        except _ConversionFailed as e:
            raise conv._fail(col, e.index, e.reason) from None
    try:
        if pa.types.is_date(target):
            _check_range(out, _MIN_DAY, _MAX_DAY, pa.int32(), _REASONS[FT.NAIVE_DATE])
        elif pa.types.is_timestamp(target):
            _check_range(out, _MIN_US, _MAX_US, pa.int64(), _REASONS[FT(col.type)])
    except _ConversionFailed as e:
        raise conv._fail(col, e.index, e.reason) from None
    return out


# ----------------------------------------------------------------------------


def read_batch_file(path: str, key: Optional[bytes], params: FileParams, table: TableSchema,
                    *, allow_unmodified: bool) -> BatchData:
    """Read one batch file into typed Arrow (see the module docstring for the rules)."""
    if FileFormat(params.file_format) == FileFormat.PARQUET:
        return _read_parquet(path, key, params, table, allow_unmodified)
    return _read_csv(path, key, params, table, allow_unmodified)
