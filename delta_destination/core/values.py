"""Text and typed Arrow values -> a column's Arrow type, vectorised and exact.

Used by every door: Fivetran batch files (CSV text, Parquet columns), migration
values, and the other doors' records. Failures raise `ConversionFailed` with the
0-based index of the first bad value and a reason that never quotes the value.

Rules (tests in tests/unit/test_batch_reader.py):
- FLOAT/DOUBLE text is parsed with IEEE round-to-nearest, exactly like Java's
  Float/Double.parseFloat: `NaN`, `Infinity`, `-Infinity` (Java's spellings,
  which Arrow accepts as is, as well as `inf`/`nan`), and a finite value beyond
  the type's range (e.g. FLOAT `3.4028237E+38`) becomes +-Infinity.
- DECIMAL values are never rounded: more fractional digits than the scale
  (after dropping trailing zeros) or more integer digits than precision-scale
  fail.  Exponent notation (`1.2E+22`) is accepted.
- UTC_DATETIME / NAIVE_DATETIME accept 0-9 fractional digits; digits beyond
  microseconds are truncated (Spark timestamps are microseconds).  A
  UTC_DATETIME without an offset is read as UTC.  Seconds may be omitted
  (`10:15`, as Java's toString writes them when zero).
- NAIVE_TIME `HH:MM` is accepted and stored as `HH:MM:00`.
- Dates/timestamps must fall in 0001-01-01 .. 9999-12-31 (Spark's range).
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import SchemaMismatch
from .model import Column, DataType as FT
from .notices import notice
from .types import arrow_type, type_label

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


class ConversionFailed(Exception):
    """Index (0-based, within the array) and reason of the first bad value."""

    def __init__(self, index: int, reason: str):
        self.index = index
        self.reason = reason


def _first_true(mask: pa.Array) -> int:
    """Index of the first True in a bool array (nulls count as False), or -1."""
    return pc.index(mask, True).as_py()


def _fail_first_false(ok: pa.Array, reason: str) -> None:
    i = _first_true(pc.invert(ok.fill_null(True)))
    if i >= 0:
        raise ConversionFailed(i, reason)


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
    raise ConversionFailed(lo, reason)


def _stages(arr: pa.Array, *stages: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """Run conversion stages, reporting the earliest bad row over all of them.

    Each stage raises ConversionFailed with the first bad index of what it is
    given; later stages then only see the rows before it (converted by that
    stage), so a later stage can only report an earlier row, and the last
    failure recorded is the first one.
    """
    failed: Optional[ConversionFailed] = None
    for stage in stages:
        try:
            arr = stage(arr)
        except ConversionFailed as e:
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
        raise ConversionFailed(0, f"more fractional digits than scale {s} (values are never rounded)")
    if len(digits) + exp > p - s:
        raise ConversionFailed(0, f"too many integer digits for DECIMAL({p},{s})")
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
        raise SchemaMismatch(f"column {col.name!r}: DECIMAL({p},{s}) cannot be stored")
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
            except ConversionFailed as e:
                first, reason = int(i), e.reason
                break
            except decimal.InvalidOperation:
                first, reason = int(i), "not a decimal number"
                break
        if first < 0:
            arr = pc.replace_with_mask(arr, exp, pa.array(repl, pa.string()))
    if first >= 0:
        raise ConversionFailed(first, reason)
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
        raise ConversionFailed(i, reason)


def _date(arr: pa.Array) -> pa.Array:
    reason = _REASONS[FT.NAIVE_DATE]
    return _stages(arr, _check(_DATE_RE, reason), _cast_to(pa.date32(), reason),
                   _in_range(_MIN_DAY, _MAX_DAY, pa.int32(), reason))


def _all_match(arr: pa.Array, pattern: str) -> bool:
    return pc.all(pc.match_substring_regex(arr, pattern)).as_py() in (True, None)


_FINER_THAN_US = r"\.\d{6}\d*[1-9]"


def _timestamp(arr: pa.Array, ftype: FT, column: str = "?") -> pa.Array:
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
    # Spark timestamps are microseconds: digits past the 6th are truncated (not rounded),
    # and the customer is told (a Warning in Fivetran's answer).
    out = _stages(arr, _check(full, reason), *fix, _sub(r"(\.\d{6})\d+", r"\1"), *cast)
    if pc.any(pc.match_substring_regex(arr, _FINER_THAN_US)).as_py():
        notice(f"column {column!r}: timestamps with digits finer than microseconds were truncated to "
               f"microseconds (Delta/Spark timestamps have microsecond precision)")
    return out


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
        return _timestamp(arr, t, col.name)
    if t == FT.NAIVE_TIME:
        return _time(arr)
    if t == FT.BINARY:
        return _stages(arr, _check(_B64_RE, _REASONS[FT.BINARY]), _decode_base64)
    raise SchemaMismatch(f"column {col.name!r}: unsupported type {t.name}")



def convert_text(arr: pa.Array, col: Column) -> pa.Array:
    """Text (NULLs already applied) -> the column's Arrow type; raises ConversionFailed."""
    return _convert_text(arr, col)


def convert_typed(arr: pa.Array, col: Column) -> pa.Array:
    """A typed Arrow array (from Parquet or a door's records) -> the column's Arrow type,
    with overflow and range checks; raises ConversionFailed, or SchemaMismatch when the
    source type can never be read as the column's type."""
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
        raise SchemaMismatch(f"column {col.name!r} holds {src} values, which cannot be read as {type_label(col)}")
    out = arr
    if src != target:
        # Timestamps: sub-microsecond digits are truncated, as for text.
        opts = pc.CastOptions(target, allow_time_truncate=True)
        out = _checked_cast(arr, lambda a: pc.cast(a, options=opts),
                            _REASONS.get(FT(col.type), f"out of range for {FT(col.type).name}"))
    if pa.types.is_date(target):
        _check_range(out, _MIN_DAY, _MAX_DAY, pa.int32(), _REASONS[FT.NAIVE_DATE])
    elif pa.types.is_timestamp(target):
        _check_range(out, _MIN_US, _MAX_US, pa.int64(), _REASONS[FT(col.type)])
    return out
