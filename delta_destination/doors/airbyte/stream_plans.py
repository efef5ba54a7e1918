"""The configured catalog -> one table plan per stream.

Namespace -> schema (the config's `default_schema` when a stream has none), stream name ->
table, top-level properties -> columns, under the same name rules as the Fivetran door:
any UTF-8 name is used as is, unless it cannot be a directory (empty, `.`/`..`, a path
separator or control character, over 255 bytes) or a column (empty, a control
character); Spark resolves columns case-insensitively, so two properties differing only
in case are refused rather than merged. Every problem is found before anything is written.
"""
from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from ...core.api import validate_columns
from ...errors import InvalidRequest
from ...core.model import Column, DataType, TableSchema
from ...warehouse import directory_name
from .errors import CatalogInvalid
from .types import column_type

RAW_ID = "_airbyte_raw_id"
EXTRACTED_AT = "_airbyte_extracted_at"
META = "_airbyte_meta"
GENERATION_ID = "_airbyte_generation_id"
CDC_DELETED_AT = "_ab_cdc_deleted_at"
SYSTEM_COLUMNS = (
    Column(RAW_ID, DataType.STRING),
    Column(EXTRACTED_AT, DataType.UTC_DATETIME),
    Column(META, DataType.JSON),
    Column(GENERATION_ID, DataType.LONG),
)
STAGING_PREFIX = ".airbyte_tmp_"
# Staging tables only: when each row arrived (see tables.py, "coverage"), and the table
# property holding how far the rows are covered by echoed states.
STAGING_SEQ = "_airbyte_tmp_seq"
COVERED_PROPERTY = "airbyte.covered_below"


class Mode(str, enum.Enum):
    APPEND = "append"
    OVERWRITE = "overwrite"
    APPEND_DEDUP = "append_dedup"


@dataclass(frozen=True)
class StreamPlan:
    namespace: Optional[str]     # as the catalog names it (records are matched on it)
    name: str
    schema: str                  # the Delta schema (directory) it lands in
    table: TableSchema
    mode: Mode
    primary_key: tuple[str, ...]
    cursor: Optional[str]        # a top-level column, or None (then extraction time orders versions)
    generation_id: Optional[int]   # None: the platform does not use generations (column stays NULL)
    minimum_generation_id: int
    sync_id: Optional[int]

    @property
    def key(self) -> tuple[Optional[str], str]:
        return (self.namespace, self.name)

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def newer_by(self) -> tuple[str, ...]:
        """Which version of a key wins in append_dedup: a later generation (a refresh re-reads
        everything), then the cursor, then the later extraction; NULL is oldest."""
        return (GENERATION_ID,) + ((self.cursor,) if self.cursor else ()) + (EXTRACTED_AT,)

    def staging_table(self) -> TableSchema:
        return TableSchema(self.staging_name(), self.table.columns + (Column(STAGING_SEQ, DataType.LONG),))

    def staging_name(self) -> str:
        """Where an overwrite collects this sync's rows before the one-commit swap: a hidden
        table next to the target, one per stream and generation (a retry of the same
        generation resumes it)."""
        digest = hashlib.sha1(self.name.encode("utf-8")).hexdigest()[:20]
        return f"{STAGING_PREFIX}{digest}_g{self.generation_id or 0}"


def is_staging_table(_schema: str, table: str) -> bool:
    """Stream names may not take the staging prefix (plan_stream refuses them)."""
    return table.startswith(STAGING_PREFIX)


def _paths(value: Any, what: str, stream: str) -> list[str]:
    """Top-level field names of a key/cursor given as [[a], [b]] (key) or [a] (cursor)."""
    out = []
    for path in value or []:
        path = [path] if isinstance(path, str) else list(path)
        if len(path) != 1:
            raise CatalogInvalid(f"stream {stream!r}: {what} {path!r} is a nested path; only top-level fields are supported")
        out.append(path[0])
    return out


def plan_stream(configured: Mapping[str, Any], default_schema: str) -> StreamPlan:
    stream = configured.get("stream") or {}
    name = stream.get("name")
    namespace = stream.get("namespace")
    schema_name = namespace if namespace else default_schema
    try:
        directory_name("schema", schema_name)
        directory_name("table", name)
    except InvalidRequest as exc:
        raise CatalogInvalid(f"stream {name!r}: {exc.message}") from exc
    if name.startswith(STAGING_PREFIX):
        raise CatalogInvalid(f"stream {name!r}: names starting with {STAGING_PREFIX!r} are reserved for staging tables")
    try:
        mode = Mode(configured.get("destination_sync_mode"))
    except ValueError:
        raise CatalogInvalid(f"stream {name!r}: destination_sync_mode {configured.get('destination_sync_mode')!r} "
                             f"is not supported (append, overwrite, append_dedup)") from None
    properties = (stream.get("json_schema") or {}).get("properties") or {}
    if not isinstance(properties, Mapping):
        raise CatalogInvalid(f"stream {name!r}: json_schema.properties is not an object")
    system = {c.name.lower() for c in SYSTEM_COLUMNS}
    keys = _paths(configured.get("primary_key"), "primary key", name) if mode == Mode.APPEND_DEDUP else []
    cursors = _paths(configured.get("cursor_field"), "cursor", name) if mode == Mode.APPEND_DEDUP else []
    cols = list(SYSTEM_COLUMNS)
    for prop, prop_schema in properties.items():
        if prop.lower() in system:
            raise CatalogInvalid(f"stream {name!r}: property {prop!r} collides with the destination's column of that name")
        cols.append(Column(prop, column_type(prop_schema), primary_key=prop in keys))
    table = TableSchema(name, tuple(cols))
    try:
        validate_columns(table)
    except InvalidRequest as exc:
        raise CatalogInvalid(f"stream {name!r}: {exc.message}") from exc
    if mode == Mode.APPEND_DEDUP:
        if not keys:
            raise CatalogInvalid(f"stream {name!r}: append_dedup needs a primary key")
        missing = [k for k in keys + cursors if not table.has(k)]
        if missing:
            raise CatalogInvalid(f"stream {name!r}: key/cursor field(s) {missing!r} are not in the stream's schema")
    generation = configured.get("generation_id")
    minimum = configured.get("minimum_generation_id")
    return StreamPlan(namespace or None, name, schema_name, table, mode, tuple(keys), cursors[0] if cursors else None,
                      None if generation is None else int(generation), int(minimum or 0), configured.get("sync_id"))


def plan_catalog(catalog: Mapping[str, Any], default_schema: str) -> dict[tuple[Optional[str], str], StreamPlan]:
    plans: dict[tuple[Optional[str], str], StreamPlan] = {}
    tables: set[tuple[str, str]] = set()
    for configured in catalog.get("streams") or []:
        plan = plan_stream(configured, default_schema)
        if plan.key in plans or (plan.schema, plan.name) in tables:
            raise CatalogInvalid(f"stream {plan.name!r} is configured twice for schema {plan.schema!r}")
        plans[plan.key] = plan
        tables.add((plan.schema, plan.name))
    return plans
