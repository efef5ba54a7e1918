"""The connector's spec (what `spec` answers) and its config file -> Settings.

Besides where tables go, the config bounds memory: records are buffered up to
`buffer_bytes` (all streams together) before a commit, and a record over
`max_record_bytes` has its largest non-key fields NULLed (Airbyte's rule for
oversized records)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from ...errors import InvalidRequest
from ...settings import BOOL, BY_KEY, CHOICE, CONNECTION_FIELDS, NUMBER, RUNTIME_FIELDS, Field, Runtime, Settings, \
    from_environment, from_values, normalise_keys, runtime_from_values
from .errors import ConfigInvalid

DOCS_URL = "https://github.com/fivetran-delta-destination/fivetran-delta-destination/blob/main/docs/airbyte.md"
DEFAULT_BUFFER_BYTES = 32 * 1024 * 1024  # JSON bytes; buffered records take a few times that in memory
DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024
DEFAULT_FLUSH_SECONDS = 60.0

def schema_property(f: Field, order: int) -> dict:
    """A settings-schema field as a JSON-schema property of the spec."""
    prop: dict[str, Any] = {"title": f.label, "description": f.help, "order": order}
    if f.kind == NUMBER:
        prop["type"] = "number"
    elif f.kind == BOOL:
        prop["type"] = "boolean"
    else:
        prop["type"] = "string"
    if f.kind == CHOICE:
        prop["enum"] = list(f.choices)
    if f.secret:
        prop["airbyte_secret"] = True
    if f.key == "warehouse":
        prop["examples"] = ["/data/lakehouse", "s3://bucket/prefix"]
    return prop


DOOR_PROPERTIES = {
    "default_schema": {
        "title": "Default schema", "type": "string", "default": "airbyte",
        "description": "Schema (directory) for streams without a namespace.",
    },
    "buffer_bytes": {
        "title": "Buffer size (bytes)", "type": "integer", "minimum": 1, "default": DEFAULT_BUFFER_BYTES,
        "description": "Records buffered (all streams together) before a commit.",
    },
    "max_record_bytes": {
        "title": "Largest record (bytes)", "type": "integer", "minimum": 1024, "default": DEFAULT_MAX_RECORD_BYTES,
        "description": "Larger records have their largest non-key fields NULLed (noted in _airbyte_meta).",
    },
    "flush_interval_seconds": {
        "title": "Commit interval (seconds)", "type": "number", "minimum": 0, "default": DEFAULT_FLUSH_SECONDS,
        "description": "Longest time a received STATE waits for its commit and echo.",
    },
}


def connection_specification() -> dict:
    """The settings schema's connection and runtime fields (same keys as every surface), then this
    door's own."""
    props: dict[str, dict] = {}
    for i, f in enumerate(CONNECTION_FIELDS + RUNTIME_FIELDS):
        props[f.key] = schema_property(f, i)
    for j, (key, prop) in enumerate(DOOR_PROPERTIES.items(), start=len(props)):
        props[key] = {**prop, "order": j}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Delta Lake Destination Spec",
        "type": "object",
        "required": ["warehouse"],
        "additionalProperties": True,
        "properties": props,
    }


CONNECTION_SPECIFICATION = connection_specification()


def spec() -> dict:
    return {
        "documentationUrl": DOCS_URL,
        "connectionSpecification": CONNECTION_SPECIFICATION,
        "supportsIncremental": True,
        "supportsNormalization": False,
        "supportsDBT": False,
        "supported_destination_sync_modes": ["append", "overwrite", "append_dedup"],
    }


@dataclass(frozen=True)
class DestinationConfig:
    settings: Settings
    default_schema: str = "airbyte"
    buffer_bytes: int = DEFAULT_BUFFER_BYTES
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    flush_interval_seconds: float = DEFAULT_FLUSH_SECONDS
    runtime: Runtime = Runtime()   # how this run's process runs its engines (settings.RUNTIME_FIELDS)


def _number(raw: Mapping[str, Any], key: str, default, kind, minimum):
    v = raw.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not float(v).is_integer()):
        raise ConfigInvalid(f"config field {key!r} must be a number")
    if v < minimum:
        raise ConfigInvalid(f"config field {key!r} must be at least {minimum}")
    return kind(v)


def parse_config(raw: Any) -> DestinationConfig:
    if not isinstance(raw, Mapping):
        raise ConfigInvalid("the config is not a JSON object")
    values = normalise_keys(raw)
    warehouse = values.get("warehouse")
    if not isinstance(warehouse, str) or not warehouse.strip():
        raise ConfigInvalid("config field 'warehouse' is required")
    for f in CONNECTION_FIELDS + RUNTIME_FIELDS:
        v = values.get(f.key)
        if v is None:
            continue
        wanted = {NUMBER: (int, float), BOOL: (bool, str)}.get(f.kind, str)
        if isinstance(v, bool) and f.kind == NUMBER or not isinstance(v, wanted):
            raise ConfigInvalid(f"config field {f.key!r} must be a {'number' if f.kind == NUMBER else 'string'}")
    if raw.get("default_schema") is not None and not isinstance(raw.get("default_schema"), str):
        raise ConfigInvalid("config field 'default_schema' must be a string")
    try:
        settings = from_values({**from_environment(), **{k: v for k, v in values.items() if k in BY_KEY and v != ""}})
        runtime = runtime_from_values(values)
    except InvalidRequest as exc:
        raise ConfigInvalid(exc.message) from exc
    return DestinationConfig(
        settings=settings,
        default_schema=(raw.get("default_schema") or "airbyte").strip() or "airbyte",
        buffer_bytes=_number(raw, "buffer_bytes", DEFAULT_BUFFER_BYTES, int, 1),
        max_record_bytes=_number(raw, "max_record_bytes", DEFAULT_MAX_RECORD_BYTES, int, 1024),
        flush_interval_seconds=_number(raw, "flush_interval_seconds", DEFAULT_FLUSH_SECONDS, float, 0),
        runtime=runtime,
    )


def load_json_file(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise ConfigInvalid(f"cannot read the {what} file ({exc.strerror})") from exc
    except ValueError:
        raise ConfigInvalid(f"the {what} file is not valid JSON") from None
