"""Buffered records -> typed Arrow rows in the table's columns (a change set's values).

Airbyte's rule for values that do not fit their column: the field is NULL and the
record's `_airbyte_meta.changes` says so (`NULLED`, `DESTINATION_TYPECAST_ERROR`); the
sync goes on. Primary-key and cursor fields are never nulled: such a record is refused
(RecordRejected), because writing it would merge it into the wrong row.
Fields not in the catalog are ignored; missing fields are NULL.
"""
from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from typing import Any, Optional

import pyarrow as pa

from ...core.model import DataType, TableSchema
from ...core.types import arrow_type
from .stream_plans import CDC_DELETED_AT, EXTRACTED_AT, GENERATION_ID, META, RAW_ID, STAGING_SEQ, StreamPlan
from .errors import RecordRejected

INT64 = (-(2 ** 63), 2 ** 63 - 1)
# emitted_at is epoch milliseconds; PyAirbyte's cache replays it in seconds. Below this
# value (1973 in ms, year 5138 in s) it is read as seconds.
SECONDS_BELOW = 100_000_000_000


@dataclass
class Record:
    """One RECORD as buffered: its data, extraction time (ms) and source-side meta changes."""

    data: dict
    emitted_at: int
    changes: list = field(default_factory=list)
    size: int = 0
    seq: int = 0  # when it arrived, for overwrite staging (see tables.py)


class NotConvertible(Exception):
    pass


def _to_long(v: Any) -> int:
    if isinstance(v, bool):
        raise NotConvertible
    if isinstance(v, int):
        out = v
    elif isinstance(v, float) and math.isfinite(v) and v.is_integer():
        out = int(v)
    elif isinstance(v, str) and v.strip().lstrip("+-").isdigit():
        out = int(v.strip())
    else:
        raise NotConvertible
    if not INT64[0] <= out <= INT64[1]:
        raise NotConvertible
    return out


def _to_double(v: Any) -> float:
    if isinstance(v, bool):
        raise NotConvertible
    if isinstance(v, (int, float)):
        out = float(v)
    elif isinstance(v, str):
        try:
            out = float(v)
        except ValueError:
            raise NotConvertible from None
    else:
        raise NotConvertible
    if not math.isfinite(out):
        raise NotConvertible
    return out


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise NotConvertible


def _to_date(v: Any) -> date:
    if not isinstance(v, str):
        raise NotConvertible
    try:
        return date.fromisoformat(v.strip())
    except ValueError:
        raise NotConvertible from None


def _parse_ts(v: Any) -> datetime:
    if not isinstance(v, str):
        raise NotConvertible
    text = v.strip()
    if text.endswith(" BC"):
        raise NotConvertible  # before year 1: no Spark timestamp holds it
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise NotConvertible from None


def _to_utc(v: Any) -> datetime:
    ts = _parse_ts(v)
    if ts.tzinfo is None:
        return ts.replace(tzinfo=timezone.utc)  # no offset given: read as UTC
    return ts.astimezone(timezone.utc)


def _to_naive(v: Any) -> datetime:
    return _parse_ts(v).replace(tzinfo=None)  # the wall-clock time as written


def json_text(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def _to_text(v: Any) -> str:
    return v if isinstance(v, str) else json_text(v)


_CONVERT = {
    DataType.LONG: _to_long,
    DataType.DOUBLE: _to_double,
    DataType.BOOLEAN: _to_bool,
    DataType.NAIVE_DATE: _to_date,
    DataType.UTC_DATETIME: _to_utc,
    DataType.NAIVE_DATETIME: _to_naive,
    DataType.NAIVE_TIME: _to_text,
    DataType.STRING: _to_text,
    DataType.JSON: json_text,
}


def extracted_at(emitted_at: int) -> datetime:
    ms = emitted_at * 1000 if emitted_at < SECONDS_BELOW else emitted_at
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def to_arrow(plan: StreamPlan, records: list[Record], table: Optional[TableSchema] = None) -> pa.Table:
    """The records as rows of the table (system columns first). `table` is the stored table's
    schema when it has columns the catalog lacks (they stay NULL)."""
    table = table or plan.table
    in_catalog = set(plan.table.column_names) - {RAW_ID, EXTRACTED_AT, META, GENERATION_ID, STAGING_SEQ}
    props = [c for c in table.columns if c.name in in_catalog]  # the stored types decide
    protected = set(plan.primary_key) | ({plan.cursor} if plan.cursor else set())
    values: dict[str, list] = {c.name: [] for c in props}
    raw_ids, extracted, metas = [], [], []
    for n, rec in enumerate(records, start=1):
        changes = list(rec.changes)
        for c in props:
            v = rec.data.get(c.name)
            if v is None:
                values[c.name].append(None)
                continue
            try:
                values[c.name].append(_CONVERT[c.type](v))
            except NotConvertible:
                if c.name in protected:
                    raise RecordRejected(f"stream {plan.name!r} record {n} of the batch: primary key or cursor field "
                                         f"{c.name!r} does not fit its type {c.type.name}") from None
                values[c.name].append(None)
                changes.append({"field": c.name, "change": "NULLED", "reason": "DESTINATION_TYPECAST_ERROR"})
        for k in plan.primary_key:
            if values[k][-1] is None:
                raise RecordRejected(f"stream {plan.name!r} record {n} of the batch: primary key field {k!r} is missing")
        raw_ids.append(str(uuid.uuid4()))
        extracted.append(extracted_at(rec.emitted_at))
        meta = {"sync_id": plan.sync_id, "changes": changes} if plan.sync_id is not None else {"changes": changes}
        metas.append(json_text(meta))
    n = len(records)
    columns = {RAW_ID: raw_ids, EXTRACTED_AT: extracted, META: metas, GENERATION_ID: [plan.generation_id] * n,
               STAGING_SEQ: [r.seq for r in records], **values}
    arrays, names = [], []
    for c in table.columns:
        typ = arrow_type(c)
        if c.name in columns:
            arrays.append(pa.array(columns[c.name], type=typ))
        else:
            arrays.append(pa.nulls(n, typ))
        names.append(c.name)
    return pa.Table.from_arrays(arrays, names=names)


def check_identity(plan: StreamPlan, rec: Record, where: str) -> None:
    """Primary-key and cursor fields must be present (keys) and fit their type: checked as
    each record arrives, so a bad one stops the sync before anything after it is written."""
    types = {c.name: c.type for c in plan.table.columns}
    for k in plan.primary_key + ((plan.cursor,) if plan.cursor else ()):
        v = rec.data.get(k)
        if v is None:
            if k in plan.primary_key:
                raise RecordRejected(f"{where}: stream {plan.name!r} record has no value for primary key field {k!r}")
            continue
        try:
            _CONVERT[types[k]](v)
        except NotConvertible:
            raise RecordRejected(f"{where}: stream {plan.name!r} record's primary key or cursor field {k!r} "
                                 f"does not fit its type {types[k].name}") from None


def fit_size(plan: StreamPlan, rec: Record, limit: int, where: str) -> None:
    """A record over `limit` bytes: its largest fields (never key or cursor) are NULLed until it
    fits, each noted in `_airbyte_meta.changes` (DESTINATION_RECORD_SIZE_LIMITATION)."""
    protected = set(plan.primary_key) | ({plan.cursor} if plan.cursor else set())
    sizes = sorted(((len(json_text(v).encode("utf-8")), k) for k, v in rec.data.items()
                    if v is not None and k not in protected), reverse=True)
    total = rec.size
    for size, k in sizes:
        if total <= limit:
            break
        rec.data[k] = None
        rec.changes.append({"field": k, "change": "NULLED", "reason": "DESTINATION_RECORD_SIZE_LIMITATION"})
        total -= size
    if total > limit:
        raise RecordRejected(f"{where}: stream {plan.name!r} record is larger than {limit} bytes even without "
                             f"its non-key fields")
    rec.size = total


def latest_per_key(plan: StreamPlan, rows: pa.Table) -> pa.Table:
    """One row per primary key: the newest by the plan's ordering (NULL oldest); on a full
    tie the later record wins. The core merges it with what is stored by the same rule."""
    if rows.num_rows < 2:
        return rows
    keys = rows.select(list(plan.primary_key)).to_pylist()
    order = [rows.column(c).to_pylist() for c in plan.newer_by]
    best: dict[tuple, int] = {}
    for i, k in enumerate(keys):
        kt = tuple(k.values())
        j = best.get(kt)
        if j is None or not _older(order, i, j):
            best[kt] = i
    keep = sorted(best.values())
    if len(keep) == rows.num_rows:
        return rows
    return rows.take(pa.array(keep))


def _older(order: list[list], i: int, j: int) -> bool:
    """Is row i strictly older than row j?"""
    for col in order:
        a, b = col[i], col[j]
        if a == b:
            continue
        if a is None:
            return True
        if b is None:
            return False
        return a < b
    return False


def is_cdc_delete(plan: StreamPlan, rows: pa.Table) -> Optional[pa.Array]:
    """Rows marked deleted by CDC sources (`_ab_cdc_deleted_at` set), when the stream has it."""
    if plan.table.get(CDC_DELETED_AT) is None:
        return None
    return rows.column(CDC_DELETED_AT).is_valid()
