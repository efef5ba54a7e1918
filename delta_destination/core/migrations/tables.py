"""Table migrations: drop, rename and copy (also copy to history mode) -- atomic directory
moves, so they need a local warehouse (on a storage URL they answer unsupported)."""
from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from typing import Optional

from ...engines.dialect import EngineSession
from ...engines.errors import run_engine
from ...settings import Settings
from ...warehouse import clean_stale_hidden, hidden_sibling, remove_failed_create
from .. import metadata
from ..catalog import Catalog, TableRef
from ..ddl import Tables, validate_columns
from ..delta_log import delta_version, latest_property
from ..errors import InvalidRequest, SchemaMismatch, TableAlreadyExists, TableNotFound
from ..model import TableSchema
from .common import MigrationFamily, read_table
from .operations import SUCCESS, UNSUPPORTED, CopyTable, CopyTableToHistoryMode, DropTable, MigrationDetails, RenameTable
from .sync_modes import to_history

# Written into tables made by copy_table / copy_table_to_history_mode, so that a replay
# recognises its own copy instead of failing with "already exists".
COPY_PROPERTY = "fivetran.copy_of"


class TableMigrations(MigrationFamily):
    def __init__(self, catalog: Catalog, tables: Tables):
        super().__init__(catalog, tables)
        self._trash_lock = threading.Lock()

    def drop_table(self, settings: Settings, d: MigrationDetails, op: DropTable):
        ref = self.catalog.locate(settings, d.schema, d.table)
        if not self.catalog.warehouse(settings).is_local:
            return UNSUPPORTED, "drop_table needs a local warehouse directory"
        eng = self.catalog.session(settings)
        with self.catalog.locked(ref):
            if not os.path.isdir(ref.location):
                self.forget(eng, ref)
                return SUCCESS, "drop_table: the table does not exist (nothing to drop)"
            trash = self.catalog.warehouse(settings).trash()
            dest = os.path.join(trash, uuid.uuid4().hex)
            self.fs("drop_table", lambda: (os.makedirs(trash, exist_ok=True), os.rename(ref.location, dest)))
            self.forget(eng, ref)
        self._empty_trash(trash)
        return SUCCESS, "drop_table: dropped"

    def _empty_trash(self, trash: str) -> None:
        """Deletes the dropped tables (also those left by a crash after the rename)."""
        with self._trash_lock:
            for name in os.listdir(trash) if os.path.isdir(trash) else ():
                shutil.rmtree(os.path.join(trash, name), ignore_errors=True)

    def rename_table(self, settings: Settings, d: MigrationDetails, op: RenameTable):
        src = self.catalog.locate(settings, d.schema, op.from_table or d.table)
        dst = self.catalog.locate(settings, d.schema, op.to_table)
        if not self.catalog.warehouse(settings).is_local:
            return UNSUPPORTED, "rename_table needs a local warehouse directory"
        if src.location == dst.location:
            return SUCCESS, "rename_table: same name, nothing to do"
        eng = self.catalog.session(settings)
        with self.catalog.locked(src, dst):
            src_exists, dst_exists = self.catalog.exists(eng, src), self.catalog.exists(eng, dst)
            if dst_exists and src_exists:
                raise TableAlreadyExists(f"rename_table: table {dst.display} already exists; {src.display} was not renamed")
            if dst_exists:
                self.forget(eng, src)
                return SUCCESS, f"rename_table: {src.display} is already renamed to {dst.table} (replay)"
            if not src_exists:
                raise TableNotFound(f"rename_table: table {src.display} does not exist")
            if src.table.casefold() != dst.table.casefold():  # a rename of case alone is fine
                self.catalog.check_new_name(settings, dst)
            self._clear_way(dst)
            self.fs("rename_table", lambda: os.rename(src.location, dst.location))
            self.forget(eng, src)
            self.forget(eng, dst)
        return SUCCESS, f"rename_table: renamed to {dst.table}"

    def _clear_way(self, dst: TableRef) -> None:
        """A failed CREATE can leave an empty table directory at the target: remove it; refuse
        anything else that is in the way."""
        remove_failed_create(dst.location)
        if os.path.lexists(dst.location):
            raise TableAlreadyExists(f"{dst.display}: a directory that is not a Delta table is in the way")

    def copy_table(self, settings: Settings, d: MigrationDetails, op: CopyTable):
        return self._copy(settings, d, op.from_table or d.table, op.to_table, kind="copy", soft=None)

    def copy_table_to_history_mode(self, settings: Settings, d: MigrationDetails, op: CopyTableToHistoryMode):
        return self._copy(settings, d, op.from_table or d.table, op.to_table, kind="history",
                          soft=op.soft_deleted_column or None)

    def _copy(self, settings: Settings, d: MigrationDetails, from_table: str, to_table: str, kind: str,
              soft: Optional[str]):
        what = "copy_table" if kind == "copy" else "copy_table_to_history_mode"
        src = self.catalog.locate(settings, d.schema, from_table)
        dst = self.catalog.locate(settings, d.schema, to_table)
        if not self.catalog.warehouse(settings).is_local:
            return UNSUPPORTED, f"{what} needs a local warehouse directory"
        if src.location == dst.location:
            raise InvalidRequest(f"{what}: source and target are the same table")
        eng = self.catalog.session(settings)
        with self.catalog.locked(src, dst):
            source = self.catalog.describe(eng, src)
            version = delta_version(src.location) if source is not None else None
            marker = {"source": src.display, "version": version, "kind": kind}
            if self.catalog.exists(eng, dst):
                if self._is_own_copy(dst, marker, source is not None):
                    return SUCCESS, f"{what}: {dst.table} is already this copy (replay)"
                raise TableAlreadyExists(f"{what}: table {dst.display} already exists")
            if source is None:
                raise TableNotFound(f"{what}: table {src.display} does not exist")
            self.catalog.check_new_name(settings, dst)
            if kind == "copy":
                target = TableSchema(dst.table, source.columns)
                make_df = lambda: read_table(eng, src.location)  # noqa: E731
                how = "copied into"
            else:
                if source.is_history_mode:
                    raise SchemaMismatch(f"{what}: table {src.display} is already in history mode")
                target, make_df, how = to_history(eng, src.location, source, soft, live=not soft)
                target = TableSchema(dst.table, target.columns)
                how = f"({how}) copied into"
            self._create_from(eng, dst, target, make_df, json.dumps(marker, separators=(",", ":")))
        return SUCCESS, f"{what}: {how} {dst.table}"

    def _is_own_copy(self, dst: TableRef, marker: dict, source_exists: bool) -> bool:
        try:
            got = json.loads(latest_property(dst.location, COPY_PROPERTY) or "null")
        except ValueError:
            return False
        if not isinstance(got, dict) or got.get("source") != marker["source"] or got.get("kind") != marker["kind"]:
            return False
        return not source_exists or got.get("version") == marker["version"]

    def _create_from(self, eng: EngineSession, dst: TableRef, target: TableSchema, make_df, marker: str) -> None:
        """Writes a new table (data + schema + properties: one commit) into a hidden directory
        next to the target, then renames it into place."""
        spark = eng.spark
        validate_columns(target)
        self._clear_way(dst)
        parent = os.path.dirname(dst.location)
        self.fs("create the schema directory", lambda: os.makedirs(parent, exist_ok=True))
        clean_stale_hidden(parent)
        tmp = hidden_sibling(dst.location)
        tmp_ident = f"fivetran_tmp_{uuid.uuid4().hex}"
        props = metadata.encode(target, 1)
        try:
            def go():
                (make_df().writeTo(tmp_ident).using("delta")
                 .tableProperty(metadata.PROPERTY, props).tableProperty(COPY_PROPERTY, marker)
                 .option("path", tmp).create())

            run_engine(f"write {dst.display}", go, attempts=1)
            run_engine("unregister the temporary table", lambda: spark.sql(f"DROP TABLE IF EXISTS {tmp_ident}").collect())
            self.fs(f"move the new table into {dst.display}", lambda: os.rename(tmp, dst.location))
        finally:
            try:
                spark.sql(f"DROP TABLE IF EXISTS {tmp_ident}").collect()
            except Exception:  # noqa: BLE001 - best effort
                pass
            shutil.rmtree(tmp, ignore_errors=True)
        self.forget(eng, dst)
