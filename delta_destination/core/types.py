"""Column types (Fivetran's DataType list is the core's type system) <-> Arrow <-> Spark/Delta.

| Fivetran        | Spark / Delta          | Arrow (batch reader)   |
|-----------------|------------------------|------------------------|
| BOOLEAN         | BOOLEAN                | bool                   |
| SHORT           | SMALLINT               | int16                  |
| INT             | INT                    | int32                  |
| LONG            | BIGINT                 | int64                  |
| DECIMAL(p,s)    | DECIMAL(p,s)           | decimal128(p,s)        |
| FLOAT           | FLOAT                  | float32                |
| DOUBLE          | DOUBLE                 | float64                |
| NAIVE_DATE      | DATE                   | date32                 |
| NAIVE_DATETIME  | TIMESTAMP_NTZ          | timestamp[us]          |
| UTC_DATETIME    | TIMESTAMP (UTC)        | timestamp[us, UTC]     |
| BINARY          | BINARY                 | binary                 |
| XML, JSON       | STRING                 | string                 |
| STRING          | STRING                 | string                 |
| NAIVE_TIME      | STRING ("HH:MM:SS[.f]")| string                 |
| UNSPECIFIED     | STRING                 | string                 |

Delta has no TIME type, and XML/JSON/STRING share Spark's STRING, so the exact
Fivetran type (and DECIMAL params, string_byte_length, primary keys) is kept in
the table's own metadata (see metadata.py); the Spark type alone is the
fallback when that metadata is missing or stale.
"""
from __future__ import annotations

import re

import pyarrow as pa

from ..errors import InvalidRequest
from .model import Column, DataType as FT

_SPARK = {
    FT.BOOLEAN: "BOOLEAN",
    FT.SHORT: "SMALLINT",
    FT.INT: "INT",
    FT.LONG: "BIGINT",
    FT.FLOAT: "FLOAT",
    FT.DOUBLE: "DOUBLE",
    FT.NAIVE_DATE: "DATE",
    FT.NAIVE_DATETIME: "TIMESTAMP_NTZ",
    FT.UTC_DATETIME: "TIMESTAMP",
    FT.BINARY: "BINARY",
    FT.XML: "STRING",
    FT.STRING: "STRING",
    FT.JSON: "STRING",
    FT.NAIVE_TIME: "STRING",
    FT.UNSPECIFIED: "STRING",
}

_ARROW = {
    FT.BOOLEAN: pa.bool_(),
    FT.SHORT: pa.int16(),
    FT.INT: pa.int32(),
    FT.LONG: pa.int64(),
    FT.FLOAT: pa.float32(),
    FT.DOUBLE: pa.float64(),
    FT.NAIVE_DATE: pa.date32(),
    FT.NAIVE_DATETIME: pa.timestamp("us"),
    FT.UTC_DATETIME: pa.timestamp("us", tz="UTC"),
    FT.BINARY: pa.binary(),
    FT.XML: pa.string(),
    FT.STRING: pa.string(),
    FT.JSON: pa.string(),
    FT.NAIVE_TIME: pa.string(),
    FT.UNSPECIFIED: pa.string(),
}

# Spark simple-string type names (as in DataFrame.schema simpleString / DESCRIBE) -> Fivetran.
_FROM_SPARK = {
    "boolean": FT.BOOLEAN,
    "smallint": FT.SHORT,
    "short": FT.SHORT,
    "int": FT.INT,
    "integer": FT.INT,
    "bigint": FT.LONG,
    "long": FT.LONG,
    "float": FT.FLOAT,
    "double": FT.DOUBLE,
    "date": FT.NAIVE_DATE,
    "timestamp_ntz": FT.NAIVE_DATETIME,
    "timestamp": FT.UTC_DATETIME,
    "binary": FT.BINARY,
    "string": FT.STRING,
}

_DECIMAL_RE = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


def spark_type(col: Column) -> str:
    """Spark SQL DDL type for a column."""
    if col.type == FT.DECIMAL:
        p, s = col.decimal_params()
        return f"DECIMAL({p},{s})"
    return _SPARK[FT(col.type)]


def arrow_type(col: Column) -> pa.DataType:
    if col.type == FT.DECIMAL:
        p, s = col.decimal_params()
        return pa.decimal128(p, s)
    return _ARROW[FT(col.type)]


def column_from_spark(name: str, spark_simple: str) -> Column:
    """Best-effort Fivetran column for a Spark type (used when metadata is missing)."""
    s = spark_simple.strip().lower()
    m = _DECIMAL_RE.match(s)
    if m:
        return Column(name, FT.DECIMAL, precision=int(m.group(1)), scale=int(m.group(2)))
    ft = _FROM_SPARK.get(s)
    if ft is None:
        # A type this destination never creates (written by another engine): show it as STRING.
        ft = FT.STRING
    return Column(name, ft)


def same_storage(a: Column, b: Column) -> bool:
    """True when two Fivetran columns are stored with the same Spark type."""
    return spark_type(a).upper() == spark_type(b).upper()


def type_label(col: Column) -> str:
    """The column's type as messages show it: INT, DECIMAL(38,10) ..."""
    if col.type == FT.DECIMAL:
        p, s = col.decimal_params()
        return f"DECIMAL({p},{s})"
    return FT(col.type).name


_INT_DIGITS = {"SMALLINT": 5, "INT": 10, "BIGINT": 19}
_WIDER = {
    "SMALLINT": {"INT", "BIGINT", "FLOAT", "DOUBLE"},
    "INT": {"BIGINT", "DOUBLE"},
    "FLOAT": {"DOUBLE"},
    "DATE": {"TIMESTAMP", "TIMESTAMP_NTZ"},
    "TIMESTAMP": {"TIMESTAMP_NTZ"},      # exact in the UTC session the engines run
    "TIMESTAMP_NTZ": {"TIMESTAMP"},
}


FLOAT_MAX = 3.4028234663852886e38


def value_check(old: Column, new: Column) -> str:
    """What a type change must verify in the stored values before it runs:
    "none" -- every value of the old type is exactly representable (wider integers, more
    DECIMAL digits on both sides of the point, anything but BINARY to STRING ...);
    "range" -- the target is floating point: rounding to its precision is what the change
    asks for, but a finite value must not overflow to infinity (FLOAT);
    "exact" -- every stored value must survive the cast unchanged (no rounding of a DECIMAL
    scale, no truncation of a fraction or a time of day, no reformatted text)."""
    a, b = spark_type(old), spark_type(new)
    if a == b or (b == "STRING" and a != "BINARY") or b in _WIDER.get(a, ()):
        return "none"
    if b.startswith("DECIMAL"):
        p2, s2 = new.decimal_params()
        if a.startswith("DECIMAL"):
            p1, s1 = old.decimal_params()
            if s2 >= s1 and p2 - s2 >= p1 - s1:
                return "none"
        elif a in _INT_DIGITS and p2 - s2 >= _INT_DIGITS[a]:
            return "none"
    if b == "DOUBLE" and (a in _INT_DIGITS or a.startswith("DECIMAL")):
        return "none"      # rounding to DOUBLE precision, never out of range
    if b in ("FLOAT", "DOUBLE") and (a in _INT_DIGITS or a.startswith("DECIMAL") or a in ("FLOAT", "DOUBLE")):
        return "range"
    return "exact"


def validate_decimal(col: Column) -> None:
    if col.type != FT.DECIMAL:
        return
    p, s = col.decimal_params()
    if not (1 <= p <= 38) or not (0 <= s <= p):
        raise InvalidRequest(f"column {col.name!r}: DECIMAL({p},{s}) is outside 1 <= precision <= 38, 0 <= scale <= precision")
