"""The tester's ``schema_migration`` steps, run in the order the input lists them (steps, then op
names in each step, then entries): add_column / change_column_data_type / drop_column are AlterTable
calls (drop_column with drop_columns=true), every other op one Migrate call. When the server answers
success, the reference model applies the same migration on its own rows.

Choices where the tester format is not explicit: MigrationDetails.table is the entry's ``table``
(``from_table`` for table copies/renames); ``deleted_column`` becomes ``soft_deleted_column``; a JSON
null value is sent as "NULL"; set_column_to_null is update_column_value with "NULL". With
``live_only`` the history-only ops (add/drop_column_in_history_mode, migrate_history_to_soft_delete)
on a table that is live only because of ``live_only`` are skipped (a note says so).
"""
from __future__ import annotations

from typing import Callable, Optional

from delta_destination.core.model import DELETED, Column, TableSchema
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.convert import table_to_proto
from .inputs import column_from_spec
from .reference_model import ModelError, ModelTable
from .state import RunState
from .values import parse_utc


def proto_text(value) -> str:
    """A migration value as the proto's text; JSON null -> "NULL"."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Migration:
    """One schema_migration entry being sent: where it stands in the input (for messages), and the
    requests and model updates every kind of entry is made of."""

    def __init__(self, run: RunState, context: str):
        self.run = run
        self.context = context

    def migrate(self, table: str, *, expect=("success",), **operation) -> bool:
        """One Migrate call; True when the server answered one of `expect`."""
        req = pb.MigrateRequest(configuration=self.run.configuration,
                                details=pb.MigrationDetails(schema=self.run.schema, table=table, **operation))
        resp = self.run.call("Migrate", req, self.context, ok_fields=expect)
        return resp is not None and resp.WhichOneof("response") in expect

    def alter(self, t: ModelTable, columns: list[Column], drop_columns: bool = False) -> None:
        """AlterTable to exactly these columns; on success the model's table changes the same way."""
        resp = self.run.call("AlterTable", pb.AlterTableRequest(
            configuration=self.run.configuration, schema_name=self.run.schema,
            table=table_to_proto(TableSchema(t.schema.name, tuple(columns))), drop_columns=drop_columns),
            self.context)
        if resp is not None and resp.WhichOneof("response") == "success":
            model = self.run.model
            self.apply_to_model(model.alter_table_drop if drop_columns else model.alter_table, t.schema.name, columns)

    def migrate_from_table(self, e: dict, **operation) -> bool:
        """A Migrate of a table copy or rename: sent when the model has ``from_table``; the details
        name the entry's ``table``, else ``from_table``. True on success."""
        return (self.table(e, "from_table") is not None
                and self.migrate(e.get("table") or e["from_table"], **operation))

    def sync_mode(self, e: dict, kind: str, expect=("success",)) -> bool:
        """A table_sync_mode_migration of type `kind` (a TableSyncModeMigrationType name)."""
        op = pb.TableSyncModeMigrationOperation(type=getattr(pb, kind))
        if e.get("deleted_column") is not None:
            op.soft_deleted_column = e["deleted_column"]
        if e.get("keep_deleted_rows") is not None:
            op.keep_deleted_rows = bool(e["keep_deleted_rows"])
        return self.migrate(e["table"], expect=expect, table_sync_mode_migration=op)

    def apply_to_model(self, fn, *args) -> None:
        try:
            fn(*args)
        except ModelError as e:
            self.run.problem(f"{self.context}: the reference model cannot apply it: {e}")

    def table(self, e: dict, key: str = "table") -> Optional[ModelTable]:
        """The model's table the entry names; None (reported) when the model has none."""
        name = e.get(key)
        t = self.run.model.tables.get(name) if name else None
        if t is None:
            self.run.problem(f"{self.context}: table {name!r} does not exist (in the reference model); not sent")
        return t

    def history_only(self, t: ModelTable) -> bool:
        """A history-mode operation on a table that is live only because of live_only: skipped."""
        if t.history or not self.run.live_only:
            return False
        self.run.note(f"{self.context}: skipped, {t.schema.name!r} is a live table in this run "
                      f"(live_only=True) and the operation needs history mode")
        return True


# DDL: the tester sends these through AlterTable (the helper guide: "adding/dropping columns,
# changing data types ... are automatically handled by Fivetran through the AlterTable RPC call"),
# with the table as Fivetran knows it after the change.

def add_column(m: Migration, e: dict) -> None:
    t = m.table(e)
    if t is None:
        return
    new = column_from_spec(e["column"], e["data_type"], False)
    if t.schema.has(new.name):
        m.alter(t, [new.with_(primary_key=c.primary_key) if c.name == new.name else c for c in t.schema.columns])
    else:
        m.alter(t, list(t.schema.columns) + [new])


def change_column_data_type(m: Migration, e: dict) -> None:
    t = m.table(e)
    if t is None:
        return
    old = t.schema.get(e["column"])
    if old is None:
        m.run.problem(f"{m.context}: column {e['column']!r} does not exist (in the reference model); not sent")
        return
    new = column_from_spec(old.name, e["data_type"], old.primary_key)
    m.alter(t, [new if c.name == old.name else c for c in t.schema.columns])


def drop_column(m: Migration, e: dict) -> None:
    t = m.table(e)
    if t is None:
        return
    m.alter(t, [c for c in t.schema.columns if c.name != e["column"]], drop_columns=True)


# Migrate: one call per entry.

def copy_column(m: Migration, e: dict) -> None:
    t = m.table(e)
    if t is not None and m.migrate(t.schema.name, copy=pb.CopyOperation(
            copy_column=pb.CopyColumn(from_column=e["from_column"], to_column=e["to_column"]))):
        m.apply_to_model(m.run.model.copy_column, t.schema.name, e["from_column"], e["to_column"])


def update_column_value(m: Migration, e: dict, value=None) -> None:
    text = proto_text(e.get("value") if value is None else value)
    t = m.table(e)
    if t is not None and m.migrate(t.schema.name, update_column_value=pb.UpdateColumnValueOperation(
            column=e["column"], value=text)):
        m.apply_to_model(m.run.model.update_column_value, t.schema.name, e["column"], text)


def set_column_to_null(m: Migration, e: dict) -> None:
    update_column_value(m, e, value="NULL")


def add_column_with_default_value(m: Migration, e: dict) -> None:
    t = m.table(e)
    if t is None:
        return
    new = column_from_spec(e["column"], e["data_type"], False)
    text = proto_text(e.get("default_value"))
    if m.migrate(t.schema.name, add=pb.AddOperation(add_column_with_default_value=pb.AddColumnWithDefaultValue(
            column=new.name, column_type=int(new.type), default_value=text))):
        m.apply_to_model(m.run.model.add_column_with_default, t.schema.name, Column(new.name, new.type), text)


def copy_table(m: Migration, e: dict) -> None:
    copy = pb.CopyTable(from_table=e["from_table"], to_table=e["to_table"])
    if m.migrate_from_table(e, copy=pb.CopyOperation(copy_table=copy)):
        m.apply_to_model(m.run.model.copy_table, e["from_table"], e["to_table"])
        m.run.vanished.discard(e["to_table"])


def rename_column(m: Migration, e: dict) -> None:
    t = m.table(e)
    if t is not None and m.migrate(t.schema.name, rename=pb.RenameOperation(
            rename_column=pb.RenameColumn(from_column=e["from_column"], to_column=e["to_column"]))):
        m.apply_to_model(m.run.model.rename_column, t.schema.name, e["from_column"], e["to_column"])


def rename_table(m: Migration, e: dict) -> None:
    rename = pb.RenameTable(from_table=e["from_table"], to_table=e["to_table"])
    if m.migrate_from_table(e, rename=pb.RenameOperation(rename_table=rename)):
        m.apply_to_model(m.run.model.rename_table, e["from_table"], e["to_table"])
        m.run.vanished.add(e["from_table"])
        m.run.vanished.discard(e["to_table"])


def drop_table(m: Migration, e: dict) -> None:
    # a missing table is nothing to drop (success), so the model's table is not required
    if m.migrate(e["table"], drop=pb.DropOperation(drop_table=True)):
        m.run.model.drop_table(e["table"])
        m.run.vanished.add(e["table"])


def add_column_in_history_mode(m: Migration, e: dict) -> None:
    t = m.table(e)
    if t is None or m.history_only(t):
        return
    new = column_from_spec(e["column"], e["data_type"], False)
    text = proto_text(e.get("default_value"))
    ts = e["operation_timestamp"]
    if m.migrate(t.schema.name, add=pb.AddOperation(add_column_in_history_mode=pb.AddColumnInHistoryMode(
            column=new.name, column_type=int(new.type), default_value=text, operation_timestamp=ts))):
        m.apply_to_model(m.run.model.add_column_in_history_mode, t.schema.name, Column(new.name, new.type), text,
                         parse_utc(ts))


def drop_column_in_history_mode(m: Migration, e: dict) -> None:
    t = m.table(e)
    if t is None or m.history_only(t):
        return
    ts = e["operation_timestamp"]
    if m.migrate(t.schema.name, drop=pb.DropOperation(drop_column_in_history_mode=pb.DropColumnInHistoryMode(
            column=e["column"], operation_timestamp=ts))):
        m.apply_to_model(m.run.model.drop_column_in_history_mode, t.schema.name, e["column"], parse_utc(ts))


def copy_table_to_history_mode(m: Migration, e: dict) -> None:
    soft = e.get("deleted_column") or ""
    copy = pb.CopyTableToHistoryMode(from_table=e["from_table"], to_table=e["to_table"], soft_deleted_column=soft)
    if m.migrate_from_table(e, copy=pb.CopyOperation(copy_table_to_history_mode=copy)):
        m.apply_to_model(m.run.model.copy_table_to_history_mode, e["from_table"], e["to_table"], soft or None)
        m.run.vanished.discard(e["to_table"])


def soft_delete_to_history(m: Migration, e: dict) -> None:
    t = m.table(e)
    if t is not None and m.sync_mode(e, "SOFT_DELETE_TO_HISTORY"):
        m.apply_to_model(m.run.model.soft_delete_to_history, t.schema.name, e.get("deleted_column") or DELETED)


def history_to_soft_delete(m: Migration, e: dict) -> None:
    t = m.table(e)
    if t is None or m.history_only(t):
        return
    if m.sync_mode(e, "HISTORY_TO_SOFT_DELETE"):
        keep = e.get("keep_deleted_rows")
        m.apply_to_model(m.run.model.history_to_soft_delete, t.schema.name, e.get("deleted_column") or DELETED,
                         None if keep is None else bool(keep))


def live_mode(kind: str) -> Callable[[Migration, dict], None]:
    """SEMANTICS.md: the LIVE_* sync modes are not offered to partners yet, the destination
    answers `unsupported` and the table is unchanged."""
    def send(m: Migration, e: dict) -> None:
        if m.table(e) is not None:
            m.sync_mode(e, kind, expect=("unsupported",))
    return send


# The tester's schema_migration names -> functions(migration, entry).
MIGRATIONS: dict[str, Callable[[Migration, dict], None]] = {
    "add_column": add_column,
    "change_column_data_type": change_column_data_type,
    "drop_column": drop_column,
    "copy_column": copy_column,
    "update_column_value": update_column_value,
    "add_column_with_default_value": add_column_with_default_value,
    "set_column_to_null": set_column_to_null,
    "copy_table": copy_table,
    "rename_column": rename_column,
    "rename_table": rename_table,
    "drop_table": drop_table,
    "add_column_in_history_mode": add_column_in_history_mode,
    "drop_column_in_history_mode": drop_column_in_history_mode,
    "copy_table_to_history_mode": copy_table_to_history_mode,
    "migrate_soft_delete_to_history": soft_delete_to_history,
    "migrate_history_to_soft_delete": history_to_soft_delete,
    # listed by the tester's README, in none of the input files: expected `unsupported`
    "migrate_history_to_live": live_mode("HISTORY_TO_LIVE"),
    "migrate_soft_delete_to_live": live_mode("SOFT_DELETE_TO_LIVE"),
    "migrate_live_to_soft_delete": live_mode("LIVE_TO_SOFT_DELETE"),
    "migrate_live_to_history": live_mode("LIVE_TO_HISTORY"),
}


def run_steps(run: RunState) -> None:
    """Every schema_migration entry of the input, in order (skipped with a note unless the run asks
    for migrations)."""
    steps = run.spec.get("schema_migration") or []
    if not steps:
        return
    if not run.run_migrations:
        names = sorted({n for s in steps for n in s})
        run.note(f"schema_migration skipped (run_migrations=False): {', '.join(names)}")
        return
    run.migrated = True
    for i, step in enumerate(steps):
        for name, entries in step.items():
            send = MIGRATIONS.get(name)
            if send is None:
                run.problem(f"schema_migration[{i}]: {name!r} is not implemented by the client")
                continue
            for j, entry in enumerate(entries if isinstance(entries, list) else [entries]):
                m = Migration(run, f"schema_migration[{i}] {name}[{j}]")
                run.log(m.context)
                send(m, entry)
