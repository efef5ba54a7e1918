"""Table migrations: drop, rename and copy (also copy to history mode).

Readers must see each table appear or vanish in one step. How, by warehouse:
- A local disk has atomic directory renames: a drop moves the table into the trash, a
  rename moves its directory, a copy is written to a hidden directory next to its target
  and moved into place. The table's history moves with it.
- An object store has no renames. A copy is written straight to its target by the engine:
  the table appears with its first (and only) commit, which holds every row. A rename is
  that copy followed by a drop of the source; a replay that finds both finishes the drop
  (the copy carries a marker naming its source and version). A drop first commits an empty
  version (readers see no rows from then on), takes the catalog entry away, then deletes the
  files, the log last (docs/object-storage.md, "Removing a table"). Both leave a note in
  the warehouse's trash first, so what a crash interrupts is finished at the next start.
  A renamed table starts a new history (one commit); time travel to before the rename is
  not kept.
"""
from __future__ import annotations

import json
import threading
from typing import Callable, Optional

from ...engines.router import EngineSession
from ...errors import InvalidRequest, SchemaMismatch, TableAlreadyExists, TableNotFound
from ...settings import Settings
from ...private_areas import abandoned, owner_id
from .. import metadata
from ..registry import TableRef
from ..tables import validate_columns
from ..delta_log import delta_version, latest_property
from ..table_dirs import remove_failed_create, remove_uncommitted
from ..model import TableSchema
from ..sql import select_sql
from .common import MigrationFamily
from .operations import SUCCESS, CopyTable, CopyTableToHistoryMode, DropTable, MigrationDetails, RenameTable
from .sync_modes import to_history

# Written into tables made by copy_table / copy_table_to_history_mode (and renames on object
# stores), so that a replay recognises its own copy instead of failing with "already exists".
COPY_PROPERTY = "fivetran.copy_of"


class TableMigrations(MigrationFamily):
    def __init__(self, registry, tables):
        super().__init__(registry, tables)
        self._trash_lock = threading.Lock()

    # ---- drop ----------------------------------------------------------------------------------
    def drop_table(self, settings: Settings, d: MigrationDetails, op: DropTable):
        ref = self.registry.locate(settings, d.schema, d.table)
        with self.registry.session(settings) as eng, self.registry.locked(ref):
            if not self.registry.exists(eng, ref):
                self.forget(eng, ref)
                self.registry.catalogs.drop(settings, d.schema, d.table, ref.location)
                return SUCCESS, "drop_table: the table does not exist (nothing to drop)"
            self._drop(eng, ref, hide=lambda: self.registry.catalogs.drop(settings, d.schema, d.table, ref.location))
        return SUCCESS, "drop_table: dropped"

    def _drop(self, eng: EngineSession, ref: TableRef, hide: Callable[[], None]) -> None:
        """The table gone. On an object store (docs/object-storage.md, "Removing a table"): a note
        in the trash, one commit that empties the table, `hide` (its catalog entry goes), then
        the data files and the log last: whatever a crash interrupts is a valid table with no
        rows or no table at all, and the note's removal is finished at the next start."""
        wh = ref.warehouse
        if wh.can_rename:
            dest = wh.private_areas.new_trash_location()
            self.fs("drop_table", lambda: (wh.storage.make_dirs(wh.private_areas.trash()), wh.storage.rename_dir(ref.location, dest)))
            self.forget(eng, ref)
            hide()
            self._empty_trash(ref)
            return
        note = wh.private_areas.note_removal(ref.location)
        # One commit that empties the table: readers see no rows from here on, never a half-deleted table.
        eng.overwrite(f"empty {ref.display} before its files are deleted", ref.location,
                      select_sql(eng.table_name(ref.location), ["*"], "WHERE false"))
        self.forget(eng, ref)
        hide()
        self.fs("drop_table", lambda: wh.storage.delete_table_files(ref.location))
        wh.private_areas.done_removal(note)

    def _empty_trash(self, ref: TableRef) -> None:
        """Deletes the dropped tables of this process (and those a dead process left)."""
        wh = ref.warehouse
        mine = owner_id() + "-"
        with self._trash_lock:
            for entry in wh.storage.list(wh.private_areas.trash()):
                if entry.is_dir and (entry.name.startswith(mine) or abandoned(entry)):
                    wh.storage.delete_tree(entry.location)

    # ---- rename ------------------------------------------------------------------------------
    def rename_table(self, settings: Settings, d: MigrationDetails, op: RenameTable):
        src = self.registry.locate(settings, d.schema, op.from_table or d.table)
        dst = self.registry.locate(settings, d.schema, op.to_table)
        if src.location == dst.location:
            return SUCCESS, "rename_table: same name, nothing to do"
        with self.registry.session(settings) as eng, self.registry.locked(src, dst):
            src_exists, dst_exists = self.registry.exists(eng, src), self.registry.exists(eng, dst)
            if dst_exists and src_exists:
                marker = self._marker(src, "rename")
                if self._is_own_copy(dst, marker, source_exists=True):
                    # a crash between the copy and the drop: finish it
                    self._drop(eng, src, hide=lambda: self.registry.catalogs.rename(
                        settings, d.schema, src.table, dst.table, dst.location, src.location))
                    return SUCCESS, f"rename_table: {src.display} renamed to {dst.table} (replay finished the drop)"
                raise TableAlreadyExists(f"rename_table: table {dst.display} already exists; {src.display} was not renamed")
            if dst_exists:
                self.forget(eng, src)
                self.registry.catalogs.rename(settings, d.schema, src.table, dst.table, dst.location, src.location)
                return SUCCESS, f"rename_table: {src.display} is already renamed to {dst.table} (replay)"
            if not src_exists:
                raise TableNotFound(f"rename_table: table {src.display} does not exist")
            if src.table.casefold() != dst.table.casefold():  # a rename of case alone is fine
                self.registry.check_new_name(settings, dst)
            self.registry.catalogs.check(settings, d.schema, dst.table)
            if src.warehouse.can_rename:
                self._clear_way(dst)
                self.fs("rename_table", lambda: src.warehouse.storage.rename_dir(src.location, dst.location))
                self.forget(eng, src)
                self.forget(eng, dst)
                self.registry.catalogs.rename(settings, d.schema, src.table, dst.table, dst.location, src.location)
                how = f"renamed to {dst.table}"
            else:
                source = self.registry.require(eng, src)
                marker = self._marker(src, "rename")
                self._create_from(eng, dst, TableSchema(dst.table, source.columns),
                                  lambda view: select_sql(eng.table_name(src.location), ["*"]), None, marker)
                self._drop(eng, src, hide=lambda: self.registry.catalogs.rename(
                    settings, d.schema, src.table, dst.table, dst.location, src.location))
                how = f"copied to {dst.table} in one commit, then {src.table} dropped"
        return SUCCESS, f"rename_table: {how}"

    def _clear_way(self, dst: TableRef) -> None:
        """A failed CREATE can leave an empty table folder at the target: remove it; refuse
        anything else that is in the way."""
        remove_failed_create(dst.warehouse, dst.location)
        if dst.warehouse.storage.exists(dst.location):
            raise TableAlreadyExists(f"{dst.display}: a directory that is not a Delta table is in the way")

    # ---- copy --------------------------------------------------------------------------------
    def copy_table(self, settings: Settings, d: MigrationDetails, op: CopyTable):
        return self._copy(settings, d, op.from_table or d.table, op.to_table, kind="copy", soft=None)

    def copy_table_to_history_mode(self, settings: Settings, d: MigrationDetails, op: CopyTableToHistoryMode):
        return self._copy(settings, d, op.from_table or d.table, op.to_table, kind="history",
                          soft=op.soft_deleted_column or None)

    def _copy(self, settings: Settings, d: MigrationDetails, from_table: str, to_table: str, kind: str,
              soft: Optional[str]):
        what = "copy_table" if kind == "copy" else "copy_table_to_history_mode"
        src = self.registry.locate(settings, d.schema, from_table)
        dst = self.registry.locate(settings, d.schema, to_table)
        if src.location == dst.location:
            raise InvalidRequest(f"{what}: source and target are the same table")
        with self.registry.session(settings) as eng, self.registry.locked(src, dst):
            source = self.registry.describe(eng, src)
            marker = self._marker(src, kind) if source is not None else {"source": src.display, "version": None, "kind": kind}
            if self.registry.exists(eng, dst):
                if self._is_own_copy(dst, marker, source is not None):
                    self.registry.catalogs.register(settings, d.schema, dst.table, dst.location)
                    return SUCCESS, f"{what}: {dst.table} is already this copy (replay)"
                raise TableAlreadyExists(f"{what}: table {dst.display} already exists")
            if source is None:
                raise TableNotFound(f"{what}: table {src.display} does not exist")
            self.registry.check_new_name(settings, dst)
            self.registry.catalogs.check(settings, d.schema, dst.table)
            src_name = eng.table_name(src.location)
            if kind == "copy":
                target = TableSchema(dst.table, source.columns)
                self._create_from(eng, dst, target, lambda view: select_sql(src_name, ["*"]), None, marker)
                how = "copied into"
            else:
                if source.is_history_mode:
                    raise SchemaMismatch(f"{what}: table {src.display} is already in history mode")
                conv = to_history(eng, src.location, source, soft, live=not soft)
                target = TableSchema(dst.table, conv.target.columns)
                self._create_from(eng, dst, target, lambda view: conv.select(src_name, view), conv.params, marker)
                how = f"({conv.how}) copied into"
            self.registry.catalogs.register(settings, d.schema, dst.table, dst.location)
        return SUCCESS, f"{what}: {how} {dst.table}"

    def _marker(self, src: TableRef, kind: str) -> dict:
        return {"source": src.display, "version": delta_version(src.warehouse, src.location), "kind": kind}

    def _is_own_copy(self, dst: TableRef, marker: dict, source_exists: bool) -> bool:
        try:
            got = json.loads(latest_property(dst.warehouse, dst.location, COPY_PROPERTY) or "null")
        except ValueError:
            return False
        if not isinstance(got, dict) or got.get("source") != marker["source"] or got.get("kind") != marker["kind"]:
            return False
        return not source_exists or got.get("version") == marker["version"]

    def _create_from(self, eng: EngineSession, dst: TableRef, target: TableSchema, select, params, marker: dict) -> None:
        """A new table (data + schema + properties: ONE commit) at `dst`, from `select(view)` over
        the shipped `params` (a one-row table, or None). On a local disk it is written into a
        hidden directory next to the target and moved into place; on an object store it is
        written in place, with a note so that a crash before its commit leaves nothing behind."""
        validate_columns(target)
        self._clear_way(dst)
        wh = dst.warehouse
        props = {metadata.PROPERTY: metadata.encode(target, 1), COPY_PROPERTY: json.dumps(marker, separators=(",", ":"))}

        def write(location: str) -> None:
            if params is None:
                eng.create_as(f"write {dst.display}", location, select(None), props)
                return
            with eng.shipped(params, wh) as view:
                eng.create_as(f"write {dst.display}", location, select(view), props)

        if wh.can_rename:
            parent = wh.storage.parent(dst.location)
            self.fs("create the schema directory", lambda: wh.storage.make_dirs(parent))
            tmp = wh.private_areas.hidden_sibling(dst.location)
            try:
                write(tmp)
                self.fs(f"move the new table into {dst.display}", lambda: wh.storage.rename_dir(tmp, dst.location))
            finally:
                wh.storage.delete_tree(tmp)
        else:
            note = wh.private_areas.note_removal(dst.location, only_without_commits=True)
            try:
                write(dst.location)
            except BaseException:
                remove_uncommitted(wh, dst.location)
                raise
            finally:
                wh.private_areas.done_removal(note)
        self.forget(eng, dst)

