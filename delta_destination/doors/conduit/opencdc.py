"""OpenCDC records -> decoded records: which table, which key, which operation, which fields.

Pure except for Avro schemas, which come from a `SchemaSource` (Conduit's schema service).
Every problem is a BadRecord naming the record's place in the batch and the part at fault,
never a value.
"""
from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from ...errors import InvalidRequest
from ...names import check_column_name, check_path_name
from .columns import MAX_EXACT_INT
from .errors import BadRecord
from .params import ConnectorConfig

UPSERT, DELETE = "upsert", "delete"
# opencdc.v1.Operation numbers
_OPS = {1: ("create", UPSERT), 2: ("update", UPSERT), 3: ("delete", DELETE), 4: ("snapshot", UPSERT)}
COLLECTION = "opencdc.collection"
SCHEMA_META = {"key": ("opencdc.key.schema.subject", "opencdc.key.schema.version"),
               "payload": ("opencdc.payload.schema.subject", "opencdc.payload.schema.version")}


class SchemaSource(Protocol):
    def avro(self, subject: str, version: int) -> Any:
        """The parsed Avro schema (fastavro) of subject@version; raises SchemaUnavailable."""


@dataclass(frozen=True)
class Decoded:
    position: bytes
    operation: str                 # create, update, delete, snapshot (for logs)
    action: str                    # UPSERT or DELETE
    table: str
    key: dict = field(default_factory=dict)     # key column -> value (never empty, never NULL)
    row: dict = field(default_factory=dict)     # UPSERT: every field of payload.after, key included


def decode(record, cfg: ConnectorConfig, schemas: Optional[SchemaSource], where: str) -> Decoded:
    """`where` names the record for messages ("record 3 (position 2 bytes)")."""
    op = _OPS.get(int(record.operation))
    if op is None:
        raise BadRecord(f"{where}: operation {int(record.operation)} is not create, update, delete or snapshot")
    operation, action = op
    meta = dict(record.metadata)
    table = _table(meta, cfg, where)
    key_value = _data(record.key, "key", meta, schemas, where) if record.HasField("key") else None
    if action == UPSERT:
        after = _data(record.payload.after, "payload", meta, schemas, where) if record.payload.HasField("after") else None
        row = _object(after, f"{where}: payload.after")
        key = _key(key_value, row, cfg, where)
        clash = [k for k in key if k in row and row[k] != key[k]]
        if clash:   # never overwrite a payload field silently with the record key
            raise BadRecord(f"{where}: payload field(s) {', '.join(map(repr, clash))} differ from the record key "
                            f"(rename the column with 'key.column' or take the key with 'key.fields')")
        row.update(key)
        _check_fields(row, where)
        return Decoded(record.position, operation, action, table, key, row)
    before = None
    if cfg.key_fields and record.payload.HasField("before"):
        before = _object(_data(record.payload.before, "payload", meta, schemas, where), f"{where}: payload.before")
    key = _key(key_value, before or {}, cfg, where)
    _check_fields(key, where)
    return Decoded(record.position, operation, action, table, key, {})


# Names already checked: every record of a stream names the same few tables and fields, and
# checking each name of each record again cost a third of the decoding time.
_GOOD_TABLES: set[str] = set()
_GOOD_COLUMNS: set[str] = set()
_MAX_REMEMBERED = 100_000


def _remember(known: set[str], name: str) -> None:
    if len(known) < _MAX_REMEMBERED:
        known.add(name)


def _table(meta: dict, cfg: ConnectorConfig, where: str) -> str:
    name = cfg.table or meta.get(COLLECTION, "")
    if name in _GOOD_TABLES:
        return name
    if not name:
        raise BadRecord(f"{where}: no table: the record has no {COLLECTION} metadata and the setting 'table' is empty")
    try:
        check_path_name("table", name)
    except InvalidRequest as exc:
        raise BadRecord(f"{where}: {exc.message}") from None
    _remember(_GOOD_TABLES, name)
    return name


def _key(value: Any, row: dict, cfg: ConnectorConfig, where: str) -> dict:
    if cfg.key_fields:
        source = value if isinstance(value, dict) and all(f in value for f in cfg.key_fields) else row
        missing = [f for f in cfg.key_fields if source.get(f) is None]
        if missing:
            raise BadRecord(f"{where}: key field(s) {', '.join(map(repr, missing))} missing or null")
        return {f: source[f] for f in cfg.key_fields}
    if value is None or value == {} or value == "":
        raise BadRecord(f"{where}: the record has no key (set 'key.fields' to take the key from the payload)")
    if isinstance(value, dict):
        nulls = [k for k, v in value.items() if v is None]
        if nulls:
            raise BadRecord(f"{where}: key field(s) {', '.join(map(repr, nulls))} are null")
        return dict(value)
    if isinstance(value, (list, bytes, bytearray)):
        raise BadRecord(f"{where}: the key is a {type(value).__name__}, not text or a structure")
    return {cfg.key_column: value if isinstance(value, str) else json.dumps(value)}


def _object(value: Any, what: str) -> dict:
    if value is None:
        return {}          # nil payload: no fields (as Conduit's Go destinations read it)
    if not isinstance(value, dict):
        raise BadRecord(f"{what} is a {type(value).__name__}, not an object of fields")
    return dict(value)


def _check_fields(row: dict, where: str) -> None:
    for name in row:
        if name in _GOOD_COLUMNS:
            continue
        try:
            check_column_name(name)
        except InvalidRequest as exc:
            raise BadRecord(f"{where}: {exc.message}") from None
        _remember(_GOOD_COLUMNS, name)


def _data(data, part: str, meta: dict, schemas: Optional[SchemaSource], where: str) -> Any:
    which = data.WhichOneof("data")
    if which is None:
        return None
    if which == "structured_data":
        try:
            return struct_dict(data.structured_data)
        except ValueError:
            raise BadRecord(f"{where}: {part} holds a number that is not finite (NaN or infinity)") from None
    raw = bytes(data.raw_data)
    subject_key, version_key = SCHEMA_META[part]
    subject, version = meta.get(subject_key), meta.get(version_key)
    if subject and version and raw:
        return _avro(raw, subject, version, schemas, f"{where}: {part}")
    if not raw:
        return None
    return _raw(raw, part, f"{where}: {part}")


def _avro(raw: bytes, subject: str, version: str, schemas: Optional[SchemaSource], what: str) -> Any:
    import fastavro

    try:
        number = int(version)
    except ValueError:
        raise BadRecord(f"{what}: schema version {version!r} is not a number") from None
    if schemas is None:
        raise BadRecord(f"{what}: Avro data, but no schema service to read schema {subject!r}")
    schema = schemas.avro(subject, number)
    buf = io.BytesIO(raw)
    try:
        value = fastavro.schemaless_reader(buf, schema, None)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is the record's
        raise BadRecord(f"{what}: not valid Avro for schema {subject!r} version {number} ({type(exc).__name__})") from None
    if buf.tell() != len(raw):
        raise BadRecord(f"{what}: {len(raw) - buf.tell()} bytes left over after the Avro record of schema {subject!r}")
    return value


def _raw(raw: bytes, part: str, what: str) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRecord(f"{what}: raw data that is not UTF-8 text (and no Avro schema in the metadata)") from None
    if part == "key" and not text.lstrip().startswith("{"):
        return text        # a plain key (a word, a number, an id): kept as text, exactly
    try:
        return json.loads(text)
    except ValueError:
        raise BadRecord(f"{what}: raw data that is neither JSON nor Avro with a schema in the metadata") from None


def struct_dict(s) -> dict:
    """A google.protobuf.Struct as plain Python values, read directly (protobuf's json_format
    took most of the decoding time). A Struct holds every number as a float64: integral ones
    within 2^53 become integers. NaN and infinity raise ValueError (JSON, and so a Struct read
    as JSON, has no such numbers)."""
    return {k: _value(v) for k, v in s.fields.items()}


def _value(v) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "string_value":
        return v.string_value
    if kind == "number_value":
        n = v.number_value
        if not math.isfinite(n):
            raise ValueError("not a finite number")
        return int(n) if n.is_integer() and abs(n) <= MAX_EXACT_INT else n
    if kind == "bool_value":
        return v.bool_value
    if kind == "struct_value":
        return struct_dict(v.struct_value)
    if kind == "list_value":
        return [_value(x) for x in v.list_value.values]
    return None     # null_value, or no value set (json_format reads both as null)
