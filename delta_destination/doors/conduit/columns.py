"""OpenCDC values -> the core's column types, chosen deliberately (docs/conduit.md):

| value (after decoding)                          | column            | Delta            |
|-------------------------------------------------|-------------------|------------------|
| bool                                            | BOOLEAN           | BOOLEAN          |
| integer (JSON int, Avro int/long, a Struct      | LONG              | BIGINT           |
|   number with no fraction and |n| <= 2^53)      |                   |                  |
| other numbers (Struct/JSON/Avro float, double)  | DOUBLE            | DOUBLE           |
| text, Avro string/enum/uuid                     | STRING            | STRING           |
| Avro bytes/fixed                                | BINARY            | BINARY           |
| nested object or list                           | JSON              | STRING (JSON)    |
| Avro timestamp-millis/micros                    | UTC_DATETIME      | TIMESTAMP        |
| Avro local-timestamp-*                          | NAIVE_DATETIME    | TIMESTAMP_NTZ    |
| Avro date                                       | NAIVE_DATE        | DATE             |
| Avro time-millis/micros                         | NAIVE_TIME        | STRING           |
| Avro decimal(p,s)                               | DECIMAL(38,s)     | DECIMAL(38,s)    |
| null only                                       | STRING            | STRING           |

A Struct carries every number as a float64, so an integral Struct number is taken as an
integer; when a later record brings a fraction for that column, the column is widened to
DOUBLE (exact: every stored value is an integer of at most 2^53). No other type change is
made: a value that does not fit its column nacks its record, naming column and type only.
"""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import uuid
from typing import Any, Optional

from ...core.model import Column, DataType as T
from ...core.types import type_label

MAX_EXACT_INT = 2 ** 53
_INT_RANGE = {T.SHORT: 2 ** 15, T.INT: 2 ** 31, T.LONG: 2 ** 63}
_INTEGERS = (T.SHORT, T.INT, T.LONG)
_TEXT = (T.STRING, T.XML, T.UNSPECIFIED)


class DoesNotFit(ValueError):
    """A value that its column cannot hold; the message names types, never the value."""


def kind_of(value: Any) -> Optional[T]:
    """The column type a value would create; None for null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return T.BOOLEAN
    if isinstance(value, int):
        return T.LONG
    if isinstance(value, float):
        return T.DOUBLE
    if isinstance(value, decimal.Decimal):
        return T.DECIMAL
    if isinstance(value, (str, uuid.UUID)):
        return T.STRING
    if isinstance(value, (bytes, bytearray)):
        return T.BINARY
    if isinstance(value, dt.datetime):
        return T.UTC_DATETIME if value.tzinfo is not None else T.NAIVE_DATETIME
    if isinstance(value, dt.date):
        return T.NAIVE_DATE
    if isinstance(value, dt.time):
        return T.NAIVE_TIME
    return T.JSON  # dict, list, anything nested


def new_column(name: str, value: Any, primary_key: bool = False) -> Column:
    kind = kind_of(value) or T.STRING
    if kind == T.DECIMAL:
        exponent = value.as_tuple().exponent
        scale = min(max(-exponent, 0), 37) if isinstance(exponent, int) else 0
        return Column(name, T.DECIMAL, primary_key, precision=38, scale=scale)
    return Column(name, kind, primary_key)


def widened(col: Column, value: Any) -> Optional[Column]:
    """The column a value needs when its current type cannot hold it but may grow (integer to
    DOUBLE); None when the column holds it as it is. Raises DoesNotFit otherwise."""
    try:
        to_python(col, value)
        return None
    except DoesNotFit:
        if col.type in _INTEGERS and isinstance(value, float) and not isinstance(value, bool):
            return col.with_(type=T.DOUBLE)
        raise


def to_python(col: Column, value: Any) -> Any:
    """The value as the Arrow array of the column's type takes it, or DoesNotFit."""
    if value is None:
        return None
    t = col.type
    if t == T.BOOLEAN and isinstance(value, bool):
        return value
    if t in _INTEGERS and isinstance(value, int) and not isinstance(value, bool):
        if -_INT_RANGE[t] <= value < _INT_RANGE[t]:
            return value
        raise DoesNotFit(f"an integer out of the range of {type_label(col)}")
    if t in (T.DOUBLE, T.FLOAT) and not isinstance(value, bool):
        if isinstance(value, float):
            return value
        if isinstance(value, int) and abs(value) <= MAX_EXACT_INT:
            return float(value)
    if t == T.DECIMAL and isinstance(value, (int, decimal.Decimal)) and not isinstance(value, bool):
        p, s = col.decimal_params()
        d = decimal.Decimal(value)
        exp = d.as_tuple().exponent
        if isinstance(exp, int) and -exp <= s and len(d.as_tuple().digits) - max(-exp, 0) <= p - s:
            return d
        raise DoesNotFit(f"a decimal that does not fit {type_label(col)} exactly")
    if t in _TEXT and isinstance(value, (str, uuid.UUID)):
        return str(value)
    if t == T.NAIVE_TIME:
        if isinstance(value, dt.time):
            return value.isoformat()
        if isinstance(value, str):
            return value
    if t == T.JSON:
        return json_text(value)   # a text value becomes a JSON string: the column holds JSON only
    if t == T.BINARY and isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if t == T.NAIVE_DATE and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value
    if t == T.NAIVE_DATETIME and isinstance(value, dt.datetime) and value.tzinfo is None:
        return value
    if t == T.UTC_DATETIME and isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc)
    raise DoesNotFit(f"a {_label(kind_of(value))} value where the column is {type_label(col)}")


def _label(kind: Optional[T]) -> str:
    return kind.name if kind is not None else "null"


def json_text(value: Any) -> str:
    return json.dumps(value, default=_json_default, sort_keys=False, ensure_ascii=False)


def _json_default(v: Any):
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, uuid.UUID):
        return str(v)
    raise TypeError(type(v).__name__)
