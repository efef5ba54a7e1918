"""The connector's settings: one table drives both the Specification Conduit shows and the
validation Configure does (Conduit itself does not validate settings against the spec).

Settings are a flat string map with dotted keys, as in Conduit's pipeline YAML.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional

from ...errors import InvalidRequest
from ...names import check_column_name, check_path_name
from ...settings import BOOL as SCHEMA_BOOL, BY_KEY, CHOICE, CONNECTION_FIELDS, NUMBER, RUNTIME_FIELDS, Field, Runtime, \
    Settings, from_environment, from_values, normalise_keys, runtime_from_values
from .errors import InvalidConfig

STRING, INT, FLOAT, BOOL, DURATION = "string", "int", "float", "bool", "duration"
BUFFER_BATCHES = 3                  # buffer.records = 0: this many batches may wait
UNLIMITED_BATCH_BUFFER = 10_000     # ... and this many records when batches have no size limit


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: str
    description: str
    required: bool = False
    choices: tuple[str, ...] = ()
    min_value: Optional[int] = None       # for INT: value must be > min_value - 1


def schema_param(f: Field) -> Param:
    """A settings-schema field as a connector parameter (same key as on every surface)."""
    kind = {NUMBER: FLOAT, SCHEMA_BOOL: STRING}.get(f.kind, STRING)
    choices = ("",) + f.choices if f.kind == CHOICE else ()
    return Param(f.key, kind, "", f.help + (" (a secret)" if f.secret else ""), required=f.key == "warehouse",
                 choices=choices)


PARAMS: tuple[Param, ...] = tuple(schema_param(f) for f in CONNECTION_FIELDS + RUNTIME_FIELDS) + (
    Param("schema", STRING, "conduit", "Schema (directory under the warehouse) that holds the tables."),
    Param("table", STRING, "", "Fixed table name for every record. Empty: the record's opencdc.collection metadata "
          "names the table (a record without it is nacked)."),
    Param("key.column", STRING, "key", "Column that holds a record key that is not a structure (raw bytes, text, "
          "a JSON scalar): such keys are stored as text in this column."),
    Param("key.fields", STRING, "", "Comma-separated payload fields that form the key, used instead of the record "
          "key (for sources whose records carry no key). Deletes then take them from payload.before."),
    Param("sdk.batch.size", INT, "1000", "Records per Delta commit (0 = no size limit). A batch is written when it "
          "is full, when sdk.batch.delay has passed since its first record, or when Conduit stops the connector.",
          min_value=0),
    Param("sdk.batch.delay", DURATION, "1s", "Longest time a record waits in a batch (Go duration, e.g. 500ms, 2s; "
          "0 = no time limit). With size and delay both 0 every record is its own commit."),
    Param("buffer.records", INT, "0", "Most records received and waiting to be written; while that many wait the "
          "connector stops reading, so Conduit waits too (backpressure). 0 = three batches (3 x sdk.batch.size, "
          f"or {UNLIMITED_BATCH_BUFFER} when sdk.batch.size is 0).", min_value=0),
    Param("buffer.bytes", INT, str(64 * 1024 * 1024), "Most bytes of records received and waiting to be written "
          "(as Conduit sent them); a larger record is still taken when nothing else waits.", min_value=1),
)
BY_NAME = {p.name: p for p in PARAMS}

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """A Go duration string (`1h2m3.5s`, `500ms`, `0`) in seconds."""
    s = text.strip()
    if s in ("0", ""):
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION_RE.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    if pos != len(s) or pos == 0:
        raise ValueError(f"not a duration: {text!r}")
    return total


@dataclass(frozen=True)
class ConnectorConfig:
    settings: Settings
    schema: str
    table: Optional[str]                  # None: from opencdc.collection
    key_column: str
    key_fields: tuple[str, ...]
    batch_size: int                       # 0 = unlimited
    batch_delay: float                    # seconds, 0 = none
    buffer_records: int = BUFFER_BATCHES * 1000
    buffer_bytes: int = 64 * 1024 * 1024
    runtime: Runtime = Runtime()          # how the connector's process runs its engine (settings.RUNTIME_FIELDS)


def parse_config(raw: Mapping[str, str]) -> ConnectorConfig:
    """Validated settings, or InvalidConfig naming the setting (never echoing secrets)."""
    raw = normalise_keys(raw)   # older spellings: spark.remote
    unknown = sorted(k for k in raw if k not in BY_NAME and not k.startswith("sdk."))
    if unknown:
        raise InvalidConfig(f"unknown setting(s): {', '.join(unknown)} (known: {', '.join(BY_NAME)})")
    values: dict[str, str] = {}
    for p in PARAMS:
        v = (raw.get(p.name) or "").strip()
        if not v:
            if p.required:
                raise InvalidConfig(f"setting {p.name!r} is required")
            v = p.default
        if p.choices and v not in p.choices:
            raise InvalidConfig(f"setting {p.name!r} must be one of {', '.join(c for c in p.choices if c)}")
        values[p.name] = v
    ints = {}
    for p in PARAMS:
        if p.type != INT:
            continue
        try:
            ints[p.name] = int(values[p.name])
        except ValueError:
            raise InvalidConfig(f"setting {p.name!r} must be an integer") from None
        if p.min_value is not None and ints[p.name] < p.min_value:
            raise InvalidConfig(f"setting {p.name!r} must be >= {p.min_value}")
    size = ints["sdk.batch.size"]
    buffer_records = ints["buffer.records"] or (BUFFER_BATCHES * size if size else UNLIMITED_BATCH_BUFFER)
    try:
        delay = parse_duration(values["sdk.batch.delay"])
    except ValueError:
        raise InvalidConfig("setting 'sdk.batch.delay' must be a duration like 500ms or 2s") from None
    try:
        settings = from_values({**from_environment(), **{k: v for k, v in values.items() if k in BY_KEY and v != ""}})
        runtime = runtime_from_values(values)
        schema = check_path_name("schema", values["schema"])
        table = check_path_name("table", values["table"]) if values["table"] else None
        key_column = check_column_name(values["key.column"])
        key_fields = tuple(check_column_name(f.strip()) for f in values["key.fields"].split(",") if f.strip())
    except InvalidRequest as exc:
        raise InvalidConfig(f"invalid setting: {exc.message}") from None
    return ConnectorConfig(settings, schema, table, key_column, key_fields, size, delay, buffer_records,
                           ints["buffer.bytes"], runtime)
