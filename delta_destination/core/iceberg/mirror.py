"""Bringing a table's Iceberg metadata up to its Delta log: every Delta version not yet mirrored
becomes one Iceberg snapshot over the same Parquet files (core/iceberg/plan.py decides which).

Run by the table registry after every operation that committed to a table with `iceberg` on
(core/registry.py `mirror_committed`), under the table's lock, so mirrors of one table in one
process never race; two processes are kept apart by the put-if-absent commit of the metadata file
(metadata_files.py). It reads the Delta commits after the mirrored version (`delta-version` in the
current snapshot's summary), so commits by another writer (upkeep, compaction, the other engine, a
second destination) and commits whose mirror a crash lost are mirrored with the next one.

The mirror never fails or undoes the Delta commit it follows: the commit is the table's truth and
is already durable; a failed mirror is logged, counted, and caught up by the next one. Its Iceberg
state is therefore always a state Delta had, at worst an older one.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Optional

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import AddSchemaUpdate, SetCurrentSchemaUpdate
from pyiceberg.table.update.snapshot import ExpireSnapshots

from ... import logs
from ...settings import DELTA_RETENTION_HOURS
from ...warehouse import Warehouse
from ..delta_log import commit_actions, delta_version, open_table
from .data_files import data_file, file_location, removed_file
from .file_io import file_io
from .housekeeping import PROPERTIES, expired_and_neighbours, new_snapshots, snapshot_producer, unreferenced
from .metadata_files import FolderCatalog, MetadataFolder
from .plan import FileAdd, MirrorPlan, Step, catch_up_range, expired_snapshots, plan_commits, plan_jump
from .schemas import (NAME_MAPPING, MirroredSchema, UnmirrorableTable, delta_columns, mirrored_schema, same_fields,
                      uses_column_mapping)

log = logs.get(__name__)

DELTA_VERSION = "delta-version"          # in each snapshot's summary: the Delta version it mirrors
DELTA_TIMESTAMP = "delta-timestamp-ms"   # and the time of that Delta commit (what snapshot expiry follows)
RETENTION_MS = DELTA_RETENTION_HOURS * 3600 * 1000
STALE_PROPERTY = "delta-destination.stale-from-delta-version"
DELTA_TABLE_ID = "delta-destination.delta-table-id"


@dataclass(frozen=True)
class MirrorResult:
    outcome: str                 # "mirrored", "current" (nothing to do), "stale", "unmirrorable"
    delta_version: Optional[int]  # the Delta version the Iceberg side now mirrors
    snapshots: int = 0
    seconds: float = 0.0
    metadata_location: Optional[str] = None   # the newest Iceberg metadata file (what a catalog entry names)


def mirrored_version(table: Optional[Table]) -> Optional[int]:
    snapshot = table.current_snapshot() if table is not None else None
    if snapshot is None or snapshot.summary is None:
        return None
    value = snapshot.summary.get(DELTA_VERSION)
    return int(value) if value is not None else None


def load(warehouse: Warehouse, location: str) -> Optional[Table]:
    """The table's newest Iceberg metadata as a pyiceberg table that commits to its folder (through
    the warehouse's store: file_io.py, metadata_files.py)."""
    folder = MetadataFolder(warehouse.storage, location)
    n = folder.newest_version()
    if n is None:
        return None
    io = file_io(warehouse, location)
    path = folder.version_file(n)
    metadata = FromInputFile.table_metadata(io.new_input(path))
    return Table(("mirror",), metadata, path, io, FolderCatalog(folder))


def fresh(warehouse: Warehouse, location: str, after: Optional[Table]) -> Table:
    """An empty Iceberg table at `location` (its first metadata commit comes after the newest
    existing version, if any: a table renamed or created again starts over)."""
    metadata = new_table_metadata(Schema(), UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, location,
                                  {"format-version": "2"})
    return Table(("mirror",), metadata, after.metadata_location if after is not None else None,
                 file_io(warehouse, location), FolderCatalog(MetadataFolder(warehouse.storage, location)))


def current_schema(table: Table) -> MirroredSchema:
    """The Iceberg table's current schema with each id's physical name (from its name mapping)."""
    mapping = {m["field-id"]: m["names"][0] for m in json.loads(table.metadata.properties.get(NAME_MAPPING, "[]"))}
    schema = table.schema()
    return MirroredSchema(schema, {f.field_id: mapping.get(f.field_id, f.name) for f in schema.fields},
                          table.metadata.last_column_id)


def row_counter(io) -> Callable[[str], int]:
    """Counts a data file's rows from its Parquet footer, read through the table's FileIO (any store)."""
    def count_rows(location: str) -> int:
        with io.new_input(location).open() as f:
            return pq.ParquetFile(f).metadata.num_rows
    return count_rows


class IcebergMirror:
    """Mirrors one table's Delta versions into its Iceberg metadata (see the module docstring)."""

    def mirror(self, warehouse: Warehouse, display: str, location: str) -> MirrorResult:
        start = time.monotonic()
        current = delta_version(warehouse, location)
        if current < 0:
            return MirrorResult("current", None)
        table = load(warehouse, location)
        mirrored = mirrored_version(table)
        if table is not None and (table.metadata.location.rstrip("/") != location.rstrip("/")
                                  or (mirrored is not None and mirrored > current)):
            log.info(f"{display}: the Iceberg metadata describes another table (renamed, or created again): "
                     "starting it over from the Delta table's current version")
            table, mirrored = fresh(warehouse, location, table), None
        if mirrored == current:
            return MirrorResult("current", current, metadata_location=table.metadata_location)
        plan = self._plan(warehouse, location, table, mirrored, current)
        target = table if table is not None else fresh(warehouse, location, None)
        try:
            done = self._apply(target, location, plan)
        except UnmirrorableTable as e:
            log.warning(f"{display}: not mirrored as Iceberg: the table holds {e}, which this mirror cannot express; "
                        "its Iceberg metadata stays at the last version it mirrored")
            return MirrorResult("unmirrorable", mirrored, 0, time.monotonic() - start,
                                target.metadata_location if mirrored is not None else None)
        took = time.monotonic() - start
        now = plan.steps[-1].version if plan.steps else mirrored
        if plan.stale:
            log.warning(f"{display}: Iceberg metadata stale from Delta version {plan.stale_from}: its live files "
                        "carry deletion vectors, which Iceberg readers of this metadata cannot apply; the Iceberg "
                        f"table shows Delta version {now} until they are purged (upkeep)")
            return MirrorResult("stale", now, done, took, target.metadata_location)
        log.info(f"{display}: mirrored Delta versions up to {now} as {done} Iceberg snapshot(s) in {took:.2f}s"
                 + (" (from the current files)" if plan.jump else ""))
        return MirrorResult("mirrored", now, done, took, target.metadata_location)

    @staticmethod
    def _plan(warehouse: Warehouse, location: str, table: Optional[Table], mirrored: Optional[int],
              current: int) -> MirrorPlan:
        versions = catch_up_range(mirrored, current)
        if versions is not None:
            commits = [(v, commit_actions(warehouse, location, v)) for v in versions]
            if all(actions is not None for _, actions in commits):
                return plan_commits(commits)
        dt = open_table(warehouse, location)
        adds = pa.table(dt.get_add_actions(flatten=True))
        dv = "deletionVector.storageType" in adds.column_names
        live = [FileAdd(row["path"], row["size_bytes"],
                        json.dumps({"numRecords": row["num_records"]}) if row.get("num_records") is not None else None,
                        dv and row.get("deletionVector.storageType") is not None)
                for row in adds.to_pylist()]
        meta = dt.metadata()
        metadata = {"schemaString": dt.schema().to_json(), "configuration": dict(meta.configuration or {}),
                    "partitionColumns": list(meta.partition_columns or []), "id": meta.id}
        prefix = location.rstrip("/") + "/"
        held = set()
        snapshot = table.current_snapshot() if table is not None and mirrored is not None else None
        if snapshot is not None:
            for manifest in snapshot.manifests(table.io):
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                    path = entry.data_file.file_path
                    held.add(path[len(prefix):] if path.startswith(prefix) else path)
        return plan_jump(dt.version(), live, held, metadata)

    @staticmethod
    def _apply(table: Table, location: str, plan: MirrorPlan) -> int:
        """Commit the plan's snapshots (one metadata file for all of them), then delete what no
        retained snapshot names any more (housekeeping.py); returns how many snapshots."""
        before = table.metadata
        tx = table.transaction()
        stale = str(plan.stale_from) if plan.stale else None
        if table.metadata.properties.get(STALE_PROPERTY) != stale:
            if stale is None:
                tx.remove_properties(STALE_PROPERTY)
            else:
                tx.set_properties({STALE_PROPERTY: stale})
        if plan.steps and any(before.properties.get(k) != v for k, v in PROPERTIES.items()):
            tx.set_properties(PROPERTIES)
        schema = current_schema(table) if table.metadata.schemas and table.schema().fields else None
        commits = []
        for step in plan.steps:
            if step.metadata is not None:
                schema = IcebergMirror._schema_step(tx, schema, step.metadata)
            if schema is None:
                raise UnmirrorableTable("no schema in the Delta versions read")
            commits.append(uuid.uuid4())
            IcebergMirror._snapshot(tx, table, location, schema, step, commits[-1])
            # Expiring as it goes keeps a long catch-up as cheap per step as one commit (plan.SNAPSHOTS_KEPT).
            IcebergMirror._expire(tx)
        if plan.steps or stale != table.metadata.properties.get(STALE_PROPERTY):
            tx.commit_transaction()
        if commits:
            IcebergMirror._clean(table, location, before, commits)
        return len(plan.steps)

    @staticmethod
    def _clean(table: Table, location: str, before, commits: list) -> None:
        """Delete the manifest lists and manifests of the snapshots this commit expired, and the
        manifests it wrote and merged away, where no retained snapshot lists them. A file that cannot
        be read or deleted is left (it is garbage, never a file a snapshot needs)."""
        io, after = table.io, table.metadata

        def listed(snapshot) -> list[str]:
            try:
                return [m.manifest_path for m in snapshot.manifests(io)]
            except FileNotFoundError:
                return []

        expired, near = expired_and_neighbours(before, after)
        expired_lists = {s.manifest_list: listed(s) for s in expired}
        new = new_snapshots(before, after)
        committed = [s.manifest_list for s in new] + [m for s in new for m in listed(s)]
        marks = [str(u) for u in commits]
        folder = table.catalog.folder   # the table's MetadataFolder (FolderCatalog), on its store
        written = [f"{folder.location}/{name}" for name in folder.names() if any(mark in name for mark in marks)]
        for path in unreferenced(expired_lists, [m for s in near for m in listed(s)], written, committed):
            try:
                io.delete(path)
            except FileNotFoundError:
                pass

    @staticmethod
    def _schema_step(tx, schema: Optional[MirroredSchema], metadata: dict) -> MirroredSchema:
        """A Delta metaData action's schema as the transaction's current Iceberg schema (a new
        schema only when the fields differ), with its name mapping."""
        if metadata.get("partitionColumns"):
            raise UnmirrorableTable("partition columns")
        configuration = metadata.get("configuration") or {}
        ids = {f.name: f.field_id for f in schema.schema.fields} if schema is not None else {}
        last = tx.table_metadata.last_column_id
        next_id = max((s.schema_id for s in tx.table_metadata.schemas), default=-1) + 1
        new = mirrored_schema(delta_columns(metadata["schemaString"]), ids, next_id, last,
                              uses_column_mapping(configuration))
        if schema is None or not same_fields(schema.schema, new.schema) or schema.physical != new.physical:
            if not same_fields(tx.table_metadata.schema(), new.schema):
                tx._apply((AddSchemaUpdate(schema=new.schema), SetCurrentSchemaUpdate(schema_id=-1)), ())
            tx.set_properties({NAME_MAPPING: new.name_mapping(), DELTA_TABLE_ID: str(metadata.get("id") or "")})
            return MirroredSchema(tx.table_metadata.schema(), new.physical, tx.table_metadata.last_column_id)
        return schema

    @staticmethod
    def _expire(tx) -> None:
        """Snapshot expiry following VACUUM (plan.expired_snapshots), in the same metadata commit."""
        snapshots = sorted(tx.table_metadata.snapshots, key=lambda s: s.sequence_number)
        times = [(s.snapshot_id, int(s.summary[DELTA_TIMESTAMP]) if s.summary and s.summary.get(DELTA_TIMESTAMP)
                  else None) for s in snapshots]
        expired = expired_snapshots(times, int(time.time() * 1000), RETENTION_MS)
        if expired:
            ExpireSnapshots(tx).by_ids(expired).commit()

    @staticmethod
    def _snapshot(tx, table: Table, location: str, schema: MirroredSchema, step: Step, commit_uuid) -> None:
        summary = {DELTA_VERSION: str(step.version)}
        if step.timestamp_ms is not None:
            summary[DELTA_TIMESTAMP] = str(step.timestamp_ms)
        count_rows = row_counter(table.io)
        with snapshot_producer(tx, table.io, summary, bool(step.removes), commit_uuid) as p:
            for path in step.removes:
                p.delete_data_file(removed_file(location, path))
            for add in step.adds:
                p.append_data_file(data_file(location, add, schema, count_rows))


__all__ = ["IcebergMirror", "MirrorResult", "DELTA_VERSION", "STALE_PROPERTY", "file_location", "load"]
