"""What every migration family shares: parsing migration values, one-commit rewrites,
set-every-row MERGEs, and answering filesystem failures as customer tasks.

Safety rules for every operation (Fivetran's "Schema Migration Helper Guide"; where it
is silent or leaves a choice, the choice is written at the operation):
- replay: a second identical call converges to the same table (renames and copies
  recognise their own finished work, column operations only change rows that still
  differ, mode conversions recognise the converted table);
- atomicity: table renames, drops and copies are one `os.rename` of the table directory
  (copies are written to a hidden directory first); schema changes rewrite the table in
  ONE overwrite commit (a column rename is ONE metadata-only commit where the dialect
  renames in place: Apache Spark + Delta on a table with column mapping); data changes
  are ONE MERGE;
- the Fivetran metadata (table property `fivetran.schema`) cannot share the data commit
  on Sail (write options do not set table properties and REPLACE TABLE ... AS SELECT
  refuses a new schema): Tables.rewrite_table writes it first as a superset, and a
  crash in between is repaired by the replay.
"""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Optional

import pyarrow as pa

from ...engines.router import EngineSession
from ...settings import Settings
from ..registry import TableRegistry, TableRef
from ..tables import Tables
from ...errors import CustomerActionRequired, InvalidRequest, SchemaMismatch, ValueConversionError
from ..model import ACTIVE, END, START, Column, DataType, TableSchema
from ...names import check_column_name
from ..sql import set_all_rows_sql
from ..types import arrow_type, type_label, validate_decimal
from ..values import ConversionFailed, convert_text

HISTORY_COLUMNS = (START, END, ACTIVE)
EPOCH_US = 0


# ---- values ---------------------------------------------------------------------------------
def is_null_text(text: Optional[str]) -> bool:
    """Migration values are text. "NULL" is SQL NULL (the guide: "NULL can also be expected as a
    valid value"); so is the empty string, because proto3 cannot tell an unset value from ""."""
    return text is None or text == "" or text == "NULL"


def parse_value(text: Optional[str], col: Column, what: str) -> pa.Array:
    """One value, parsed exactly like a batch-file cell of that column (1-element Arrow array)."""
    typ = arrow_type(col)
    if is_null_text(text):
        return pa.nulls(1, typ)
    try:
        arr = convert_text(pa.array([text], pa.string()), col)
    except ConversionFailed as exc:
        raise ValueConversionError(f"{what}: the value does not fit column {col.name!r} ({type_label(col)}): {exc.reason}") from None
    return arr.cast(typ)


def parse_timestamp_us(text: str, what: str) -> int:
    """operation_timestamp (e.g. 2005-05-28T20:57:00Z) -> microseconds since the epoch, UTC."""
    if not text or not text.strip():
        raise InvalidRequest(f"{what}: operation_timestamp is empty")
    try:
        arr = convert_text(pa.array([text.strip()], pa.string()), Column(START, DataType.UTC_DATETIME))
    except ConversionFailed:
        raise InvalidRequest(f"{what}: operation_timestamp is not a UTC timestamp like 2005-05-28T20:57:00Z") from None
    value = arr.cast(pa.int64())[0].as_py()
    if value is None:
        raise InvalidRequest(f"{what}: operation_timestamp is empty")
    return int(value)


def utc_us_literal(us: int) -> str:
    """Microseconds since the epoch as a UTC timestamp text, e.g. '2005-05-28T20:57:00.000000Z'."""
    t = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=us)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ts_array(us: int) -> pa.Array:
    return pa.array([us], pa.int64()).cast(pa.timestamp("us", tz="UTC"))


def now_ms_us() -> int:
    now = datetime.now(timezone.utc)
    return int(now.timestamp()) * 1_000_000 + (now.microsecond // 1000) * 1000


def new_column(name: str, ftype: DataType) -> Column:
    check_column_name(name)
    if ftype not in DataType._value2member_map_:
        raise InvalidRequest(f"column {name!r}: unknown data type {int(ftype)}")
    if ftype == DataType.UNSPECIFIED:
        ftype = DataType.STRING
    c = Column(name, DataType(ftype))
    validate_decimal(c)
    return c


def history_keys_for(cur: TableSchema, ref: TableRef, what: str) -> list[str]:
    if not cur.is_history_mode:
        raise SchemaMismatch(f"{what}: table {ref.display} is not in history mode ({START} is not in its primary key)")
    for c in (END, ACTIVE):
        if not cur.has(c):
            raise SchemaMismatch(f"{what}: table {ref.display} has no {c} column")
    keys = [k for k in cur.primary_keys if k != START]
    if not keys:
        raise SchemaMismatch(f"{what}: table {ref.display} has no key besides {START}")
    return keys


def param_name(cur: TableSchema) -> str:
    taken = {n.lower() for n in cur.column_names}
    while True:
        name = f"fivetran_param_{uuid.uuid4().hex[:8]}"
        if name not in taken:
            return name


class MigrationFamily:
    """Base of the per-family handlers: the table registry and the shared one-commit steps."""

    def __init__(self, registry: TableRegistry, tables: Tables):
        self.registry = registry
        self.tables = tables

    def forget(self, eng: EngineSession, ref: TableRef) -> None:
        self.registry.schema_changed(eng, ref)
        self.registry.forget(ref)

    def run_merge(self, eng: EngineSession, settings: Settings, ref: TableRef, source: pa.Table, sql_template: str) -> None:
        """Ship `source` to the engine and run the MERGE (`{view}` in the template names it)."""
        with eng.shipped(source, ref.warehouse) as view:
            eng.execute(f"merge into {ref.display}", sql_template.replace("{view}", view))

    def set_all_rows(self, eng: EngineSession, settings: Settings, ref: TableRef, col: Column, value: pa.Array) -> None:
        """column := value on every row whose value differs, in one MERGE (no commit if none)."""
        sql = set_all_rows_sql(eng.table_name(ref.location), "{view}", col)
        self.run_merge(eng, settings, ref, pa.table({"v": value}), sql)

    @staticmethod
    def fs(action: str, fn):
        try:
            return fn()
        except OSError as exc:
            raise CustomerActionRequired(
                f"{action} failed: the warehouse refused it ({type(exc).__name__}: {exc.strerror or 'error'})"
            ) from exc
