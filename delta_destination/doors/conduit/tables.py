"""Decoded records of one batch -> one Delta commit per table, through the core.

Per table: check every record against the table's columns (a record that does not fit is
nacked alone, before anything is written), create the table on first sight or add and widen
columns (the core's DDL), fold the records into one final state per key in arrival order, and
apply that as ONE change set (one MERGE or append = one commit). A failing commit fails every
record of that table in the batch; the table stays as it was.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pyarrow as pa

from ... import logs
from ...core.api import DeltaCore
from ...core.changes import ChangeSet, Changes, Op
from ...errors import DestinationError
from ...core.model import Column, TableSchema
from ...core.types import arrow_type
from .errors import BadRecord, HostGone, TableWriteFailed
from .columns import MAX_EXACT_INT, DoesNotFit, new_column, to_python, widened
from .epochs import Epochs
from .liveness import pause_point
from .opencdc import DELETE, UPSERT, Decoded
from .params import ConnectorConfig

log = logs.get(__name__)


@dataclass
class KeyState:
    """What the batch leaves for one key: an upsert of `fields` or a delete. `fresh`: the key was
    deleted earlier in the batch, so fields the upsert does not name are NULL, not kept."""

    action: str
    fields: dict = field(default_factory=dict)
    fresh: bool = False


def fold(records: list[Decoded], key_of) -> dict[Any, KeyState]:
    """Records in arrival order -> the final state per key (dicts keep first-seen order)."""
    states: dict[Any, KeyState] = {}
    for r in records:
        k = key_of(r)
        s = states.get(k)
        if r.action == DELETE:
            states[k] = KeyState(DELETE, dict(r.key))
        elif s is None:
            states[k] = KeyState(UPSERT, dict(r.row))
        elif s.action == UPSERT:
            s.fields.update(r.row)
        else:
            states[k] = KeyState(UPSERT, dict(r.row), fresh=True)
    return states


class TablePlan:
    """The columns a table needs for a batch, grown record by record; a record that does not
    fit leaves the plan as it was."""

    def __init__(self, current: Optional[TableSchema]):
        self.current = current
        self.columns: dict[str, Column] = {c.name: c for c in (current.columns if current else ())}
        self.keys: Optional[tuple[str, ...]] = tuple(current.primary_keys) if current and current.primary_keys else None
        self.big_ints: set[str] = set()   # columns with an integer beyond 2^53 in this batch: never widened to DOUBLE

    def admit(self, r: Decoded) -> None:
        """Raises DoesNotFit (or ValueError) for a record the table cannot take."""
        keys = tuple(r.key)
        if self.keys is not None and set(keys) != set(self.keys):
            raise DoesNotFit(f"its key field(s) {', '.join(map(repr, keys))} differ from the table's key "
                             f"{', '.join(map(repr, self.keys))}")
        changes: dict[str, Column] = {}
        for name, value in (r.row if r.action == UPSERT else r.key).items():
            col = self.columns.get(name)
            if col is None:
                for existing in self.columns:
                    if existing.lower() == name.lower():
                        raise DoesNotFit(f"field {name!r} differs only in case from column {existing!r}")
                if value is not None:
                    changes[name] = new_column(name, value)
                continue
            grown = widened(col, value)
            if grown is not None:
                if name in self.big_ints:
                    raise DoesNotFit(f"field {name!r} brings a fraction, but the batch holds integers beyond 2^53 in "
                                     f"it (widening the column to DOUBLE would round them)")
                changes[name] = grown
        if r.action == DELETE and self.current is None and not self.columns:
            return  # deleting from a table that does not exist: nothing to create
        if self.keys is None:
            self.keys = keys
        for name, col in changes.items():
            self.columns[name] = col.with_(primary_key=name in self.keys)
        for name, value in r.row.items():
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_EXACT_INT:
                self.big_ints.add(name)

    def check_delete(self, r: Decoded) -> None:
        """A delete admitted before the table's key was known must match it once it is."""
        if set(r.key) != set(self.keys or ()):
            raise DoesNotFit(f"its key field(s) {', '.join(map(repr, r.key))} differ from the table's key "
                             f"{', '.join(map(repr, self.keys or ()))}")
        for k, v in r.key.items():
            to_python(self.columns[k], v)
        for k in self.keys:   # a key column always exists, even when first seen by a delete
            if k not in self.columns:
                self.columns[k] = new_column(k, r.key[k], primary_key=True)

    def schema(self, name: str) -> TableSchema:
        keys = self.keys or ()
        ordered = [self.columns[k] for k in keys if self.current is None] + \
                  [c for n, c in self.columns.items() if not (self.current is None and n in keys)]
        return TableSchema(name, tuple(c.with_(primary_key=c.name in keys) for c in ordered))


class BatchWriter:
    """`host_gone()` says why the host can no longer take acks (None while it can); `epochs`
    holds this instance's writer epochs. Both are checked by the guard right before each commit."""

    def __init__(self, core: DeltaCore, cfg: ConnectorConfig, epochs: Epochs,
                 host_gone: Callable[[], Optional[str]], env: Optional[dict] = None):
        self.core = core
        self.cfg = cfg
        self.epochs = epochs
        self.host_gone = host_gone
        self.env = env or {}

    def _check_host(self, display: str) -> None:
        reason = self.host_gone()
        if reason:
            raise HostGone(f"the host can no longer take acks ({reason})")

    def _guard(self, table: str, display: str) -> None:
        """Right before the commit: the host can still take the acks, and no newer instance
        claimed the table. Raises (nothing is committed) otherwise."""
        pause_point("before-commit-guard", self.env)
        self._check_host(display)
        self.epochs.check(table, display)
        pause_point("after-commit-guard", self.env)

    def write(self, records: list[Decoded]) -> list[Optional[BaseException]]:
        """One error (None = written) per record, in the same order; the servicer turns them
        into nack messages."""
        errors: list[Optional[BaseException]] = [None] * len(records)
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(records):
            groups.setdefault(r.table, []).append(i)
        for table, idx in groups.items():
            self._write_table(table, idx, records, errors)
        return errors

    def _write_table(self, table: str, idx: list[int], records: list[Decoded],
                     errors: list[Optional[BaseException]]) -> None:
        cfg = self.cfg
        display = f"{cfg.schema}.{table}"
        try:
            self._check_host(display)
            current = self.core.describe(cfg.settings, cfg.schema, table)
            plan = TablePlan(current)
            admitted = []
            for i in idx:
                try:
                    plan.admit(records[i])
                    admitted.append(i)
                except DoesNotFit as exc:
                    errors[i] = BadRecord(f"a {records[i].operation} record does not fit table {display}: {exc}")
            if not admitted:
                return
            if current is None and plan.keys is None:
                return  # only deletes of a table that does not exist yet: nothing to delete
            for i in list(admitted):
                if records[i].action == DELETE:
                    try:
                        plan.check_delete(records[i])
                    except DoesNotFit as exc:
                        errors[i] = BadRecord(f"a delete record does not fit table {display}: {exc}")
                        admitted.remove(i)
            target = plan.schema(table)
            if current is None:
                self.core.tables.create(cfg.settings, cfg.schema, target)
            elif target.columns != current.columns:
                self.core.tables.alter(cfg.settings, cfg.schema, target, drop_columns=False)
            if not self.epochs.claimed(table):
                self._check_host(display)
                self.epochs.claim(table, display)
            keys = list(plan.keys)
            good = [records[i] for i in admitted]
            result = self.core.writer.write(cfg.settings, cfg.schema, table,
                                            lambda stored: change_set(stored, keys, good), what="Conduit batch",
                                            guard=lambda: self._guard(table, display))
            log.info(f"{display}: {len(good)} records in one commit ({result.upserts} upserts, {result.deletes} deletes)")
        except Exception as exc:  # noqa: BLE001 - the commit did not happen: every record left fails with it
            if not isinstance(exc, DestinationError):
                log.error(f"{display}: unexpected {type(exc).__name__} while writing a batch")
            failed = TableWriteFailed(display, exc)
            for i in idx:
                if errors[i] is None:
                    errors[i] = failed


def change_set(table: TableSchema, keys: list[str], records: list[Decoded]) -> ChangeSet:
    """The batch's final state per key in the table's types: one UPSERT piece (cells a record
    did not name keep their stored value) and one DELETE piece."""
    cols = {c.name: c for c in table.columns}

    def key_of(r: Decoded):
        return tuple(to_python(cols[k], r.key[k]) for k in keys)

    states = fold(records, key_of)
    upserts = [s for s in states.values() if s.action == UPSERT]
    deletes = [s for s in states.values() if s.action == DELETE]
    out = ChangeSet()
    if upserts:
        names = [c.name for c in table.columns if c.name in keys or any(c.name in s.fields for s in upserts)
                 or any(s.fresh for s in upserts)]
        values, keep = [], []
        for n in names:
            col = cols[n]
            values.append(pa.array([to_python(col, s.fields.get(n)) for s in upserts], type=arrow_type(col)))
            keep.append(pa.array([n not in s.fields and not s.fresh for s in upserts], type=pa.bool_()))
        out.add(Changes(Op.UPSERT, pa.Table.from_arrays(values, names=names),
                        pa.Table.from_arrays(keep, names=names), source="Conduit records"))
    if deletes:
        values = [pa.array([to_python(cols[k], s.fields[k]) for s in deletes], type=arrow_type(cols[k])) for k in keys]
        out.add(Changes(Op.DELETE, pa.Table.from_arrays(values, names=list(keys)), source="Conduit deletes"))
    return out
