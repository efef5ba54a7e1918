"""JSON schema (with `format` and `airbyte_type`) -> the core's column types.

| JSON schema                                                   | core type      | Delta            |
|---------------------------------------------------------------|----------------|------------------|
| `string`                                                      | STRING         | STRING           |
| `string`, `format: date`                                      | NAIVE_DATE     | DATE             |
| `string`, `format: date-time` (`airbyte_type` absent or `timestamp_with_timezone`) | UTC_DATETIME | TIMESTAMP (UTC) |
| `string`, `format: date-time`, `airbyte_type: timestamp_without_timezone` | NAIVE_DATETIME | TIMESTAMP_NTZ |
| `string`, `format: time` (either `airbyte_type`)              | NAIVE_TIME     | STRING (text as sent) |
| `integer`, or `number` + `airbyte_type: integer`              | LONG           | BIGINT           |
| `number`                                                      | DOUBLE         | DOUBLE           |
| `boolean`                                                     | BOOLEAN        | BOOLEAN          |
| `object`, `array`, unions (`type: [a, b]`, `oneOf`, `anyOf`, `allOf`), no type, unknown | JSON | STRING (JSON text) |

`["null", X]` and `oneOf`/`anyOf` `[X, {"type": "null"}]` are X (every column is nullable). Why DOUBLE for `number`: most sources
read numbers as doubles already, and a DECIMAL(38,9) would have to round or refuse
values with more fraction digits. Why text for time: Delta has no TIME type.
"""
from __future__ import annotations

from typing import Any, Mapping

from ...core.model import DataType

JSON_TYPES = ("string", "integer", "number", "boolean", "object", "array")


def _types_of(schema: Mapping[str, Any]) -> list[str]:
    t = schema.get("type")
    if isinstance(t, str):
        names = [t]
    elif isinstance(t, list):
        names = [x for x in t if isinstance(x, str)]
    else:
        names = []
    return [n for n in names if n != "null"]


def column_type(schema: Any) -> DataType:
    """The core type of one top-level property's JSON schema."""
    if not isinstance(schema, Mapping):
        return DataType.JSON
    if "type" not in schema:
        for k in ("oneOf", "anyOf"):
            branches = [b for b in schema.get(k) or [] if not (isinstance(b, Mapping) and b.get("type") == "null")]
            if k in schema:
                # `oneOf: [X, {type: null}]` is a nullable X; real unions are JSON text.
                return column_type(branches[0]) if len(branches) == 1 else DataType.JSON
        return DataType.JSON
    types = _types_of(schema)
    if len(types) != 1:
        return DataType.JSON  # no type, or a union of several: kept as JSON text
    t = types[0]
    fmt = schema.get("format")
    airbyte_type = schema.get("airbyte_type")
    if t == "string":
        if fmt == "date":
            return DataType.NAIVE_DATE
        if fmt == "date-time":
            if airbyte_type == "timestamp_without_timezone":
                return DataType.NAIVE_DATETIME
            return DataType.UTC_DATETIME
        if fmt == "time":
            return DataType.NAIVE_TIME
        return DataType.STRING
    if t == "integer":
        return DataType.LONG
    if t == "number":
        return DataType.LONG if airbyte_type == "integer" else DataType.DOUBLE
    if t == "boolean":
        return DataType.BOOLEAN
    return DataType.JSON
