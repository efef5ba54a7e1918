"""The tester's ``ops`` (upsert, update, delete, soft_delete, truncate_before, soft_truncate_before):
each sends one request per table and, when the server answers success, applies the same change to
the reference model.

Choices where the tester format is not explicit:

* Several rows with the same key in one op of a live table: Fivetran deduplicates within a batch.
  Upserts and deletes keep the LAST occurrence; updates are merged in order (later values win,
  columns given by any of them are set), which is the state applying them one after the other gives.
* ``op_time`` is the change time for history mode; for live tables it is dropped.
* Tables without a primary key get ``_fivetran_id`` as key; rows that do not give one get a
  deterministic hash of their content (as Fivetran does).
* Updates set ``_fivetran_synced`` and leave ``_fivetran_deleted`` unmodified. Deletes remove the
  row (the stored synced is irrelevant). Soft deletes are update files with ``_fivetran_deleted`` =
  true and ``_fivetran_synced`` set, every other column unmodified.
* History mode: upserts/updates send earliest_start_files; deletes (and soft deletes, since a
  history table has no ``_fivetran_deleted``) send delete files with key + ``_fivetran_end`` =
  op_time - 1 ms; a soft truncate of a history table is sent as a hard truncate.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Optional

from google.protobuf.timestamp_pb2 import Timestamp

from delta_destination.core.model import ACTIVE, DELETED, END, FIVETRAN_ID, START, SYNCED
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from .inputs import OP_TIME
from .reference_model import ModelTable
from .state import RunState
from .values import MAX_TS, ONE_MS, format_utc, normalize, parse_utc


# -- sending ----------------------------------------------------------------------------------

def _send(run: RunState, rpc: str, context: str, build: Callable[[], Any], what: str) -> bool:
    try:
        req = build()
    except Exception as e:  # noqa: BLE001 - a file this client cannot write (e.g. Parquet + unmodified)
        run.problem(f"{context}: cannot write the batch file: {type(e).__name__}: {e}")
        return False
    run.log(f"{rpc} {what}")
    resp = run.call(rpc, req, context)
    return resp is not None and resp.WhichOneof("response") == "success"


def send_batch(run: RunState, t: ModelTable, context: str, *, replace=(), update=(), delete=()) -> bool:
    """WriteBatch with these rows; True when the server answered success."""
    return _send(run, "WriteBatch", context,
                 lambda: run.batches.batch_request(t, run.schema, run.configuration, replace=replace, update=update,
                                                   delete=delete),
                 f"{t.schema.name}: {len(replace)} replace, {len(update)} update, {len(delete)} delete rows")


def send_history_batch(run: RunState, t: ModelTable, context: str, *, earliest=(), replace=(), update=(),
                       delete=()) -> bool:
    """WriteHistoryBatch with these rows; True when the server answered success."""
    return _send(run, "WriteHistoryBatch", context,
                 lambda: run.batches.history_batch_request(t, run.schema, run.configuration, earliest=earliest,
                                                           replace=replace, update=update, delete=delete),
                 f"{t.schema.name}: {len(earliest)} earliest-start, {len(update)} update, "
                 f"{len(replace)} replace, {len(delete)} delete rows")


# -- the input's rows -----------------------------------------------------------------------------

def _content_id(raw: dict) -> str:
    content = json.dumps(raw, sort_keys=True, default=str)
    return hashlib.md5(content.encode()).hexdigest()


def _normalized_row(run: RunState, where: str, t: ModelTable, raw: dict) -> Optional[dict]:
    row = {}
    for c, v in raw.items():
        col = t.schema.get(c)
        if col is None:
            run.problem(f"{where}: column {c!r} is not in the table (ignored)")
            continue
        try:
            row[c] = normalize(col, v)
        except Exception as e:  # noqa: BLE001
            run.problem(f"{where}: column {c!r}: bad value {v!r}: {e}")
    missing = [k for k in t.business_key if row.get(k) is None]
    if missing:
        run.problem(f"{where}: key column {missing[0]!r} is missing")
        return None
    return row


def input_rows(run: RunState, op: str, name: str, raw_rows: list) -> Optional[list[dict]]:
    """The tester's rows for a table, normalised (history tables: op_time as _fivetran_start);
    None if the table is unknown. Rows that cannot be used are reported and left out."""
    t = run.model.tables.get(name)
    if t is None:
        run.problem(f"{op} {name}: the table does not exist")
        return None
    out = []
    for i, raw in enumerate(raw_rows):
        raw = dict(raw)
        op_time = raw.pop(OP_TIME, None)
        if FIVETRAN_ID in t.schema.merge_keys() and raw.get(FIVETRAN_ID) is None:
            raw[FIVETRAN_ID] = _content_id(raw)
        row = _normalized_row(run, f"{op} {name} row {i}", t, raw)
        if row is None:
            continue
        if t.history:
            if op_time is None:
                run.problem(f"{op} {name} row {i}: history mode needs op_time")
                continue
            row[START] = parse_utc(op_time)
        out.append(row)
    return out


def _batch_key(t: ModelTable, row: dict) -> tuple:
    return t.row_key(row) if t.history else t.business_key_of(row)


def dedupe_last(t: ModelTable, rows: list[dict]) -> list[dict]:
    """One row per key: the last occurrence, at the place of the last occurrence."""
    by_key: dict = {}
    for r in rows:
        k = _batch_key(t, r)
        by_key.pop(k, None)
        by_key[k] = r
    return list(by_key.values())


def merge_updates(t: ModelTable, rows: list[dict]) -> list[dict]:
    """One row per key: the updates merged in order (later values win)."""
    by_key: dict = {}
    for r in rows:
        k = _batch_key(t, r)
        merged = by_key.pop(k, {})
        merged.update(r)
        by_key[k] = merged
    return list(by_key.values())


# -- history --------------------------------------------------------------------------------------

def history_versions(t: ModelTable, rows: list[dict], partial: bool = False) -> list[dict]:
    """Versions of one batch, per key in start order: all but the last closed
    at the next start - 1 ms, the last active until MAX_TS."""
    by_key: dict = {}
    for r in merge_updates(t, rows) if partial else dedupe_last(t, rows):
        by_key.setdefault(t.business_key_of(r), []).append(r)
    out = []
    for versions in by_key.values():
        versions.sort(key=lambda r: r[START])
        carried: dict = {}
        for j, v in enumerate(versions):
            if partial:
                carried.update(v)
                v = dict(carried)
            last = j == len(versions) - 1
            v[END] = MAX_TS if last else versions[j + 1][START] - ONE_MS
            v[ACTIVE] = last
            out.append(v)
    return out


def earliest_starts(t: ModelTable, versions: list[dict]) -> list[dict]:
    """Per key, the earliest start among the batch's versions (the earliest_start_files rows)."""
    first: dict = {}
    for v in versions:
        k = t.business_key_of(v)
        if k not in first or v[START] < first[k][START]:
            first[k] = {**{c: v[c] for c in t.business_key}, START: v[START]}
    return list(first.values())


# -- the ops --------------------------------------------------------------------------------------

def _full_rows(t: ModelTable, rows: list[dict], synced) -> list[dict]:
    out = []
    for r in rows:
        full = {c: r.get(c) for c in t.schema.column_names}
        full[SYNCED] = synced
        if not t.history and r.get(DELETED) is None:
            full[DELETED] = False
        out.append(full)
    return dedupe_last(t, out)


def _merged_updates(t: ModelTable, rows: list[dict], synced) -> list[dict]:
    return merge_updates(t, [{**r, SYNCED: synced} for r in rows])


def _send_rows(run: RunState, i: int, op: str, payload: dict, *, partial: bool) -> None:
    """An upsert (replace files: whole rows) or, `partial`, an update (update files); history tables
    get the batch's versions, after earliest-start files."""
    synced = run.clock.next_op()
    kind, prepare = ("update", _merged_updates) if partial else ("replace", _full_rows)
    model = run.model
    for name, raw_rows in payload.items():
        rows = input_rows(run, op, name, raw_rows)
        if not rows:
            continue
        t = model.tables[name]
        ctx = f"ops[{i}] {op} {name}"
        rows = prepare(t, rows, synced)
        if not t.history:
            if send_batch(run, t, ctx, **{kind: rows}):
                (model.update if partial else model.upsert)(name, rows)
            continue
        versions = history_versions(t, rows, partial=partial)
        earliest = earliest_starts(t, versions)
        if send_history_batch(run, t, ctx, earliest=earliest, **{kind: versions}):
            model.history_earliest_start(name, earliest)
            (model.history_update if partial else model.history_replace)(name, versions)


def upsert(run: RunState, i: int, payload: dict) -> None:
    _send_rows(run, i, "upsert", payload, partial=False)


def update(run: RunState, i: int, payload: dict) -> None:
    _send_rows(run, i, "update", payload, partial=True)


def _close_versions(run: RunState, t: ModelTable, ctx: str, rows: list[dict]) -> None:
    """A history table has no _fivetran_deleted: a (soft) delete closes the key's version."""
    by_key: dict = {}
    for r in rows:  # the last delete of a key wins
        by_key.pop(t.business_key_of(r), None)
        by_key[t.business_key_of(r)] = {**{k: r[k] for k in t.business_key}, END: r[START] - ONE_MS}
    deletes = list(by_key.values())
    if send_history_batch(run, t, ctx, delete=deletes):
        run.model.history_delete(t.schema.name, deletes)


def delete(run: RunState, i: int, payload: dict, *, soft: bool = False) -> None:
    synced = run.clock.next_op()
    kind = "soft_delete" if soft else "delete"
    for name, raw_rows in payload.items():
        rows = input_rows(run, kind, name, raw_rows)
        if not rows:
            continue
        t = run.model.tables[name]
        ctx = f"ops[{i}] {kind} {name}"
        if t.history:
            _close_versions(run, t, ctx, rows)
            continue
        keys = dedupe_last(t, [{k: r[k] for k in t.business_key} for r in rows])
        if soft:
            if send_batch(run, t, ctx, update=[{**k, DELETED: True, SYNCED: synced} for k in keys]):
                run.model.soft_delete(name, keys, synced)
        elif send_batch(run, t, ctx, delete=[{**k, SYNCED: synced} for k in keys]):
            run.model.delete(name, keys)


def soft_delete(run: RunState, i: int, payload: dict) -> None:
    delete(run, i, payload, soft=True)


def truncate(run: RunState, i: int, payload: list, *, soft: bool = False) -> None:
    cut = run.clock.cut()
    ts = Timestamp()
    ts.FromDatetime(cut)
    kind = "soft_truncate_before" if soft else "truncate_before"
    for name in payload:
        t = run.model.tables.get(name)
        soft_here = soft and not (t is not None and t.history)
        req = pb.TruncateRequest(configuration=run.configuration, schema_name=run.schema, table_name=name,
                                 synced_column=SYNCED, utc_delete_before=ts)
        if soft_here:
            req.soft.deleted_column = DELETED
        run.log(f"Truncate {name} before {format_utc(cut)}{' (soft)' if soft_here else ''}")
        resp = run.call("Truncate", req, f"ops[{i}] {kind} {name}")
        if resp is not None and resp.WhichOneof("response") == "success":
            run.model.truncate(name, cut, DELETED if soft_here else None)


def soft_truncate(run: RunState, i: int, payload: list) -> None:
    truncate(run, i, payload, soft=True)


# The tester's op names -> the functions that run them.
OPS: dict[str, Callable[[RunState, int, Any], None]] = {
    "upsert": upsert,
    "update": update,
    "delete": delete,
    "soft_delete": soft_delete,
    "truncate_before": truncate,
    "soft_truncate_before": soft_truncate,
}
