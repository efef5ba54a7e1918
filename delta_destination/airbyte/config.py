"""The connector's spec (what `spec` answers) and its config file -> Settings.

Besides where tables go, the config bounds memory: records are buffered up to
`buffer_bytes` (all streams together) before a commit, and a record over
`max_record_bytes` has its largest non-key fields NULLed (Airbyte's rule for
oversized records)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from ..core.errors import InvalidRequest
from ..settings import ENGINES, Settings
from .errors import ConfigInvalid

DOCS_URL = "https://github.com/fivetran-delta-destination/fivetran-delta-destination/blob/main/docs/airbyte.md"
DEFAULT_BUFFER_BYTES = 32 * 1024 * 1024  # JSON bytes; buffered records take a few times that in memory
DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024
DEFAULT_FLUSH_SECONDS = 60.0

CONNECTION_SPECIFICATION = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Delta Lake Destination Spec",
    "type": "object",
    "required": ["warehouse_path"],
    "additionalProperties": True,
    "properties": {
        "warehouse_path": {
            "title": "Warehouse path", "type": "string", "order": 0,
            "description": "Directory (or storage URL as the Spark engine sees it) holding <schema>/<table> Delta tables.",
        },
        "default_schema": {
            "title": "Default schema", "type": "string", "default": "airbyte", "order": 1,
            "description": "Schema (directory) for streams without a namespace.",
        },
        "engine": {
            "title": "Engine", "type": "string", "enum": list(ENGINES), "order": 2,
            "description": "sail (embedded, default) or spark (Apache Spark + Delta).",
        },
        "spark_remote": {
            "title": "Spark Connect URL", "type": "string", "order": 3, "airbyte_secret": False,
            "description": "sc://host:port of a remote engine; empty = the embedded engine.",
        },
        "buffer_bytes": {
            "title": "Buffer size (bytes)", "type": "integer", "minimum": 1, "default": DEFAULT_BUFFER_BYTES, "order": 4,
            "description": "Records buffered (all streams together) before a commit.",
        },
        "max_record_bytes": {
            "title": "Largest record (bytes)", "type": "integer", "minimum": 1024, "default": DEFAULT_MAX_RECORD_BYTES,
            "order": 5, "description": "Larger records have their largest non-key fields NULLed (noted in _airbyte_meta).",
        },
        "flush_interval_seconds": {
            "title": "Commit interval (seconds)", "type": "number", "minimum": 0, "default": DEFAULT_FLUSH_SECONDS,
            "order": 6, "description": "Longest time a received STATE waits for its commit and echo.",
        },
    },
}


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
    warehouse = raw.get("warehouse_path")
    if not isinstance(warehouse, str) or not warehouse.strip():
        raise ConfigInvalid("config field 'warehouse_path' is required")
    for key in ("default_schema", "engine", "spark_remote"):
        if raw.get(key) is not None and not isinstance(raw.get(key), str):
            raise ConfigInvalid(f"config field {key!r} must be a string")
    try:
        settings = Settings.create(warehouse.strip(), raw.get("engine"), raw.get("spark_remote"))
    except InvalidRequest as exc:
        raise ConfigInvalid(exc.message) from exc
    return DestinationConfig(
        settings=settings,
        default_schema=(raw.get("default_schema") or "airbyte").strip() or "airbyte",
        buffer_bytes=_number(raw, "buffer_bytes", DEFAULT_BUFFER_BYTES, int, 1),
        max_record_bytes=_number(raw, "max_record_bytes", DEFAULT_MAX_RECORD_BYTES, int, 1024),
        flush_interval_seconds=_number(raw, "flush_interval_seconds", DEFAULT_FLUSH_SECONDS, float, 0),
    )


def load_json_file(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise ConfigInvalid(f"cannot read the {what} file ({exc.strerror})") from exc
    except ValueError:
        raise ConfigInvalid(f"the {what} file is not valid JSON") from None
