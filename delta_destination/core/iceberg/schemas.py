"""A Delta schema as an Iceberg schema with stable field ids, and Iceberg's name mapping for it.

Pure (tests/unit/test_iceberg_schemas.py). Why the ids matter: an Iceberg reader finds a column in
a Parquet file by its field id, so a column must keep its id across every later Delta schema (its
old files still hold it), and a new column must never take an id an old one had.

- A table with Delta column mapping (`delta.columnMapping.mode` name or id) writes the mapping's id
  (`delta.columnMapping.id`) into its Parquet files: the Iceberg id is that id, as Delta UniForm does.
- A table without it writes Parquet files without field ids, and reads them by name: the Iceberg id of
  a name is the one the current Iceberg schema gave it (kept by name across renames-by-rewrite, type
  changes and added columns), a new name gets the table's next id, and the name mapping
  (`schema.name-mapping.default`) tells readers which file column (its physical name) is which id.

Types: Delta's primitive types map to Iceberg's; byte and short widen to int (Iceberg has no
narrower integer, and readers promote the Parquet INT32 they find), `timestamp` (UTC instants) to
`timestamptz`, `timestamp_ntz` to `timestamp`. Nested types (struct, array, map) are not written by
this destination; a table that has one is refused (UnmirrorableTable) rather than mirrored wrong.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Optional

from pyiceberg.schema import Schema
from pyiceberg.types import (BinaryType, BooleanType, DateType, DecimalType, DoubleType, FloatType, IcebergType,
                             IntegerType, LongType, NestedField, StringType, TimestampType, TimestamptzType)

COLUMN_MAPPING_MODE = "delta.columnMapping.mode"
COLUMN_MAPPING_ID = "delta.columnMapping.id"
PHYSICAL_NAME = "delta.columnMapping.physicalName"
NAME_MAPPING = "schema.name-mapping.default"

_PRIMITIVES: dict[str, IcebergType] = {
    "boolean": BooleanType(), "byte": IntegerType(), "short": IntegerType(), "integer": IntegerType(),
    "long": LongType(), "float": FloatType(), "double": DoubleType(), "string": StringType(),
    "binary": BinaryType(), "date": DateType(), "timestamp": TimestamptzType(), "timestamp_ntz": TimestampType(),
}
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


class UnmirrorableTable(Exception):
    """The Delta table holds something Iceberg metadata cannot say as written (the message names
    the feature, never a value)."""


def iceberg_type(delta_type: object) -> IcebergType:
    """The Iceberg type of a Delta primitive type (its schemaString spelling).
    >>> iceberg_type("timestamp"), iceberg_type("timestamp_ntz"), iceberg_type("decimal(38,9)"), iceberg_type("short")
    (TimestamptzType(), TimestampType(), DecimalType(precision=38, scale=9), IntegerType())
    >>> iceberg_type({"type": "struct", "fields": []})
    Traceback (most recent call last):
    ...
    delta_destination.core.iceberg.schemas.UnmirrorableTable: nested Delta type struct
    """
    if isinstance(delta_type, str):
        if delta_type in _PRIMITIVES:
            return _PRIMITIVES[delta_type]
        m = _DECIMAL.match(delta_type)
        if m:
            return DecimalType(int(m.group(1)), int(m.group(2)))
        raise UnmirrorableTable(f"Delta type {delta_type}")
    kind = delta_type.get("type") if isinstance(delta_type, dict) else type(delta_type).__name__
    raise UnmirrorableTable(f"nested Delta type {kind}")


@dataclass(frozen=True)
class DeltaColumn:
    """One top-level column of a Delta schema, as the log says it."""

    name: str
    type: object                 # the schemaString type: a string for primitives
    nullable: bool
    mapping_id: Optional[int]    # delta.columnMapping.id (column mapping tables)
    physical: str                # the name its Parquet files use


def delta_columns(schema_string: str) -> list[DeltaColumn]:
    """The top-level columns of a metaData action's schemaString.
    >>> delta_columns('{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":{}}]}')
    [DeltaColumn(name='a', type='long', nullable=True, mapping_id=None, physical='a')]
    """
    out = []
    for f in json.loads(schema_string).get("fields", []):
        meta = f.get("metadata") or {}
        mid = meta.get(COLUMN_MAPPING_ID)
        out.append(DeltaColumn(f["name"], f["type"], bool(f.get("nullable", True)),
                               int(mid) if mid is not None else None, meta.get(PHYSICAL_NAME) or f["name"]))
    return out


def uses_column_mapping(configuration: dict[str, str]) -> bool:
    return (configuration.get(COLUMN_MAPPING_MODE) or "none").lower() in ("name", "id")


@dataclass(frozen=True)
class MirroredSchema:
    """The Iceberg schema of one Delta schema, the physical (file) name of each field id, and the
    highest id the table has ever used."""

    schema: Schema
    physical: dict[int, str]
    last_column_id: int

    def name_mapping(self) -> str:
        """Iceberg's default name mapping (JSON) for files without field ids: each id's physical name.
        >>> s = mirrored_schema(delta_columns('{"fields":[{"name":"a","type":"long","nullable":true}]}'), {}, None, 0)
        >>> s.name_mapping()
        '[{"field-id": 1, "names": ["a"]}]'
        """
        return json.dumps([{"field-id": f.field_id, "names": [self.physical[f.field_id]]} for f in self.schema.fields])


def mirrored_schema(columns: list[DeltaColumn], ids_by_name: dict[str, int], schema_id: Optional[int],
                    last_column_id: int, column_mapping: bool = False) -> MirroredSchema:
    """The Iceberg schema of `columns`: ids from column mapping (`column_mapping`), else the id the
    current Iceberg schema gave the name (`ids_by_name`), else the next unused one. `schema_id`:
    the id to give the schema (None: 0). Fields are optional as Delta's are nullable: Delta's NOT
    NULL is a writer's check, and an Iceberg required field would make readers refuse a NULL.
    >>> cols = delta_columns('{"fields":[{"name":"a","type":"long","nullable":true},'
    ...                      '{"name":"b","type":"string","nullable":true}]}')
    >>> s = mirrored_schema(cols, {"b": 7}, 3, 7)
    >>> [(f.field_id, f.name) for f in s.schema.fields], s.last_column_id, s.schema.schema_id
    ([(8, 'a'), (7, 'b')], 8, 3)
    """
    fields, physical, last = [], {}, last_column_id
    for c in columns:
        if column_mapping:
            if c.mapping_id is None:
                raise UnmirrorableTable("a column mapping table whose column has no mapping id")
            fid = c.mapping_id
        elif c.name in ids_by_name:
            fid = ids_by_name[c.name]
        else:
            last += 1
            fid = last
        last = max(last, fid)
        fields.append(NestedField(fid, c.name, iceberg_type(c.type), required=False))
        physical[fid] = c.physical
    return MirroredSchema(Schema(*fields, schema_id=schema_id or 0), physical, last)


def same_fields(a: Schema, b: Schema) -> bool:
    """Do two schemas hold the same fields (ids, names, types), whatever their schema ids?"""
    return [(f.field_id, f.name, f.field_type) for f in a.fields] == [(f.field_id, f.name, f.field_type) for f in b.fields]
