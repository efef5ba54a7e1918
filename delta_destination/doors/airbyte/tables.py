"""The Delta side of a sync: tables made ready, buffered records committed through the core
as change sets, and each stream finished (the overwrite swap) -- all through DeltaCore.

- append: records are appended (Op.APPEND), one commit per flush.
- append_dedup: one row per primary key per flush (latest_per_key), then one MERGE in which a
  stored row is replaced or deleted only by a newer one (ChangeSet.newer_by: generation,
  cursor, extraction time; NULL oldest). CDC deletes (`_ab_cdc_deleted_at` set) are deletes.
- minimum_generation_id > 0 (append, append_dedup): at the end of a successful sync, rows of
  older generations (or none) are deleted in one commit. Until then readers see both.
- overwrite: records go to a hidden staging table (one per stream and generation); at the end
  of a successful sync the target's contents are replaced by it in ONE commit, so readers
  see the old table until then. The staging table is dropped afterwards.

Coverage (overwrite retries): each staged row carries when it arrived (`_airbyte_tmp_seq`:
the attempt's start in microseconds plus the number of states received before it, so it
grows across attempts), and before states are echoed the staging table records up to where
rows are covered by them (a table property, values only grow). A retry of the same
generation deletes the staged rows past that mark, because the platform resends them.
"""
from __future__ import annotations

from dataclasses import replace

import pyarrow.compute as pc

from ... import logs
from ...core.api import DeltaCore
from ...core.changes import ChangeSet, Changes, Op
from ...core.model import TableSchema
from ...settings import Settings
from .stream_plans import COVERED_PROPERTY, GENERATION_ID, STAGING_PREFIX, STAGING_SEQ, Mode, StreamPlan
from .records import Record, is_cdc_delete, latest_per_key, to_arrow

log = logs.get(__name__)
DOOR_OPERATION = "AirbyteWrite"


class StreamTables:
    def __init__(self, core: DeltaCore, settings: Settings):
        self.core = core
        self.settings = settings
        self._effective: dict[tuple, TableSchema] = {}
        self._max_seq: dict[tuple, int] = {}   # overwrite: latest arrival committed to staging
        self._mark: dict[tuple, int] = {}      # overwrite: the coverage mark last recorded

    def _target(self, plan: StreamPlan) -> str:
        return plan.staging_name() if plan.mode == Mode.OVERWRITE else plan.name

    def prepare(self, plan: StreamPlan) -> None:
        """Create the table (or the staging table) or add the catalog's new columns. Stored
        columns keep their types (values are converted to them); key flags follow the catalog."""
        target = self._target(plan)
        if plan.mode == Mode.OVERWRITE:
            self._drop_stale_staging(plan)
        stored = self.core.describe(self.settings, plan.schema, target)
        wanted = plan.staging_table() if plan.mode == Mode.OVERWRITE else replace(plan.table, name=target)
        if stored is None:
            self.core.tables.create(self.settings, plan.schema, wanted)
            self._effective[plan.key] = wanted
            return
        have = {c.name: c for c in stored.columns}
        cols = [c.with_(primary_key=c.name in plan.primary_key) for c in stored.columns]
        cols += [c for c in wanted.columns if c.name not in have]
        desired = TableSchema(target, tuple(cols))
        if desired.columns != stored.columns:
            self.core.tables.alter(self.settings, plan.schema, desired, drop_columns=False)
        self._effective[plan.key] = desired
        if plan.mode == Mode.OVERWRITE:
            self._resume_staging(plan)

    def _resume_staging(self, plan: StreamPlan) -> None:
        """A retry of the same generation: keep the staged rows that echoed states cover (the
        platform resends everything after the last echoed state), delete the rest -- all of
        them when no state was echoed (a source without checkpoints starts over)."""
        marks = self.core.tables.property_values(self.settings, plan.schema, plan.staging_name(), COVERED_PROPERTY)
        covered_below = max((int(m) for m in marks if m.isdigit()), default=0)
        self.core.tables.delete_outside(self.settings, plan.schema, plan.staging_name(), STAGING_SEQ,
                                        at_or_above=covered_below)
        log.info(f"{plan.display}: resuming the staged rows of generation {plan.generation_id or 0}")

    def mark_covered(self, plan: StreamPlan, covered_below: int) -> None:
        """Before states are echoed: staged rows arriving before `covered_below` are covered.
        Recorded only when some staged row is not covered by the mark recorded last."""
        if plan.mode == Mode.OVERWRITE and self._max_seq.get(plan.key, -1) >= self._mark.get(plan.key, 0):
            self._mark[plan.key] = covered_below
            self.core.tables.set_property(self.settings, plan.schema, plan.staging_name(), COVERED_PROPERTY,
                                          str(covered_below))

    def _drop_stale_staging(self, plan: StreamPlan) -> None:
        """Staging tables of this stream from other generations (an abandoned earlier sync)."""
        keep = plan.staging_name()
        for name in self.core.table_names(self.settings, plan.schema, keep.rsplit("_g", 1)[0] + "_g"):
            if name != keep and name.startswith(STAGING_PREFIX):
                self.core.drop_table(self.settings, plan.schema, name)

    def commit(self, plan: StreamPlan, records: list[Record]) -> int:
        """One Delta commit with the records; returns the number of rows sent."""
        if not records:
            return 0
        table = self._effective[plan.key]
        rows = to_arrow(plan, records, table)
        changes = ChangeSet()
        if plan.mode == Mode.APPEND_DEDUP:
            rows = latest_per_key(plan, rows)
            changes.newer_by = plan.newer_by
            deleted = is_cdc_delete(plan, rows)
            if deleted is None:
                changes.add(Changes(Op.UPSERT, rows, source=f"stream {plan.name!r}"))
            else:
                changes.add(Changes(Op.UPSERT, rows.filter(pc.invert(deleted)), source=f"stream {plan.name!r}"))
                changes.add(Changes(Op.DELETE, rows.filter(deleted), source=f"stream {plan.name!r} (CDC deletes)"))
        else:
            changes.add(Changes(Op.APPEND, rows, source=f"stream {plan.name!r}"))
        self.core.writer.write(self.settings, plan.schema, table.name, lambda _t: changes, what=DOOR_OPERATION)
        self._max_seq[plan.key] = max(self._max_seq.get(plan.key, -1), max(r.seq for r in records))
        return rows.num_rows

    def finish(self, plan: StreamPlan) -> None:
        """A stream whose sync succeeded: the overwrite swap (one commit), then staging dropped;
        append/append_dedup with a minimum generation: older generations deleted (one commit)."""
        if plan.mode != Mode.OVERWRITE:
            if plan.minimum_generation_id > 0:
                self.core.tables.delete_outside(self.settings, plan.schema, plan.name, GENERATION_ID,
                                                below=plan.minimum_generation_id)
            return
        staging = self.core.location(self.settings, plan.schema, plan.staging_name())
        self.core.tables.replace_contents(self.settings, plan.schema, plan.table, staging)
        self.core.drop_table(self.settings, plan.schema, plan.staging_name())
        log.info(f"{plan.display}: overwritten with this sync's rows in one commit")

