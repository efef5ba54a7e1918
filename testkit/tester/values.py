"""Values as the reference model holds them: one canonical Python value per column type.

The tester's JSON, a Delta table read back from disk and a Migrate text all reach the same
canonical value (``normalize``), so the model and the disk compare with ``==``; the other
way, ``file_value`` writes a canonical value as Fivetran's batch-file text.
"""
from __future__ import annotations

import base64
from datetime import date, datetime, time, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any, Optional

import numpy as np

from delta_destination.core.model import Column, DataType as FT

MAX_TS = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # the guide's minTimestamp
ONE_MS = timedelta(milliseconds=1)

_TEXT_TYPES = (FT.STRING, FT.JSON, FT.XML, FT.NAIVE_TIME, FT.UNSPECIFIED)


def parse_utc(value) -> datetime:
    """An aware UTC datetime from a datetime or ISO text (``Z`` or an offset; naive is UTC)."""
    if isinstance(value, datetime):
        dt = value
    else:
        s = str(value).strip()
        if s.endswith("Z") or s.endswith("z"):
            s = s[:-1] + "+00:00"
        dt = datetime.fromisoformat(s.replace(" ", "T", 1))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)


def format_utc(dt: datetime) -> str:
    dt = dt.astimezone(timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def _boolean(value: Any) -> bool:
    if isinstance(value, str):
        low = value.strip().lower()
        if low not in ("true", "false"):
            raise ValueError(f"not a boolean: {value!r}")
        return low == "true"
    return bool(value)


def _integer(value: Any) -> int:
    if isinstance(value, (float, Decimal)) and value != int(value):
        raise ValueError(f"not an integer: {value!r}")
    return int(value)


def _decimal(col: Column, value: Any) -> Decimal:
    _precision, scale = col.decimal_params()
    d = value if isinstance(value, Decimal) else Decimal(str(value))
    with localcontext() as ctx:
        ctx.prec = 100
        return d.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)


def _naive_date(value: Any) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    return date.fromisoformat(str(value).strip()[:10])


def _naive_datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        dt = value
    else:
        dt = datetime.fromisoformat(str(value).strip().rstrip("Zz").replace(" ", "T", 1))
    if dt.tzinfo is not None:
        dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
    return dt


def _binary(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    # The tester's convention: a JSON string is the binary value's UTF-8 bytes.
    return str(value).encode("utf-8")


def _text(value: Any) -> str:
    if isinstance(value, time):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_NORMALIZERS = {
    FT.BOOLEAN: _boolean,
    FT.SHORT: _integer, FT.INT: _integer, FT.LONG: _integer,
    FT.FLOAT: lambda v: float(np.float32(float(v))),
    FT.DOUBLE: float,
    FT.NAIVE_DATE: _naive_date,
    FT.NAIVE_DATETIME: _naive_datetime,
    FT.UTC_DATETIME: parse_utc,
    FT.BINARY: _binary,
}


def normalize(col: Column, value: Any) -> Any:
    """Canonical Python value for a column: what the model stores and what a
    Delta read-back is converted to before comparing."""
    if value is None:
        return None
    t = FT(col.type)
    if t == FT.DECIMAL:
        return _decimal(col, value)
    return _NORMALIZERS.get(t, _text)(value)


def value_text(col: Column, value: Any) -> str:
    """Fivetran's text form of a normalised value (used for type conversions)."""
    t = FT(col.type)
    if t == FT.BOOLEAN:
        return "true" if value else "false"
    if t == FT.DECIMAL:
        return format(value, "f")
    if t in (FT.FLOAT, FT.DOUBLE):
        return repr(float(value))
    if t == FT.UTC_DATETIME:
        return format_utc(value)
    if t in (FT.NAIVE_DATE, FT.NAIVE_DATETIME):
        return value.isoformat()
    if t == FT.BINARY:
        return base64.b64encode(value).decode("ascii")
    return str(value)


def convert_value(old: Column, new: Column, value: Any) -> Any:
    """A stored value after AlterTable changes its column's type."""
    if value is None:
        return None
    if FT(old.type) == FT(new.type) and FT(new.type) != FT.DECIMAL:
        return value
    if FT(new.type) in _TEXT_TYPES:
        if FT(old.type) == FT.BINARY:
            return value.decode("utf-8", errors="replace")
        return value_text(old, value)
    if FT(old.type) == FT.BINARY and FT(new.type) != FT.BINARY:
        raise ValueError(f"cannot convert BINARY column {old.name!r} to {FT(new.type).name}")
    if FT(old.type) in (FT.FLOAT, FT.DOUBLE) and FT(new.type) == FT.DECIMAL:
        return normalize(new, Decimal(repr(float(value))))
    return normalize(new, value)


def migration_value(col: Column, text: Optional[str]) -> Any:
    """A Migrate value (text) for a column. "NULL" is SQL NULL (the guide: "NULL can also be
    expected as a valid value"); so is an empty value (proto3 cannot tell it from unset, the
    destination's documented choice). Other text is read like a batch-file cell (BINARY as
    base64, like the batch files)."""
    if text is None or text == "" or text == "NULL":
        return None
    if FT(col.type) == FT.BINARY:
        return base64.b64decode(text, validate=True)
    return normalize(col, text)


def file_value(col: Column, value: Any) -> str:
    """Fivetran CSV text of a normalised model value."""
    if FT(col.type) == FT.FLOAT:
        return str(np.float32(value))  # shortest text that round-trips the float32
    return value_text(col, value)


def sort_key(value: Any):
    """Total order over mixed normalised values (for stable printing)."""
    if value is None:
        return (0, "")
    return (1, type(value).__name__, value if not isinstance(value, bool) else int(value))
