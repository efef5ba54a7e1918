"""The tester's input files (testdata/fivetran-tester-inputs/PROVENANCE.md, "The format"): finding and
loading them, and the tables they declare, as Fivetran creates them."""
from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from delta_destination.core.model import (
    ACTIVE,
    DELETED,
    END,
    FIVETRAN_ID,
    START,
    SYNCED,
    Column,
    DataType as FT,
    TableSchema,
)

OP_TIME = "op_time"  # a row's change time in history mode (dropped for live tables)


def input_files(folder: Path) -> list[str]:
    """Every input file under `folder`, as sorted relative paths. Raises when there is none: a test
    parametrized over them then fails at collection instead of silently running no case."""
    files = sorted(p.relative_to(folder).as_posix() for p in Path(folder).rglob("*.json"))
    if not files:
        raise FileNotFoundError(f"no tester input files (*.json) under {folder}")
    return files


def load_input(path) -> dict:
    """Parse a tester input file; decimals keep their exact digits."""
    with open(path, encoding="utf-8") as f:
        return json.load(f, parse_float=Decimal)


def has_history_tables(spec) -> bool:
    """Does the input declare any table with history_mode? Without one, the live-only and the
    history variant of a run are the same run."""
    if isinstance(spec, dict):
        return spec.get("history_mode") is True or any(has_history_tables(v) for v in spec.values())
    if isinstance(spec, list):
        return any(has_history_tables(v) for v in spec)
    return False


def column_from_spec(name: str, spec: Any, primary_key: bool) -> Column:
    """A column from the input's type: a type name, or {"type", "precision", "scale", "string_byte_length"}."""
    if isinstance(spec, str):
        return Column(name, FT[spec.strip().upper()], primary_key=primary_key)
    if isinstance(spec, dict):
        t = FT[str(spec["type"]).strip().upper()]
        if t == FT.DECIMAL:
            return Column(name, t, primary_key=primary_key, precision=int(spec.get("precision", 38)),
                          scale=int(spec.get("scale", 0)))
        return Column(name, t, primary_key=primary_key,
                      string_byte_length=spec.get("string_byte_length"))
    raise ValueError(f"column {name!r}: unknown type spec {spec!r}")


def build_table(name: str, spec: dict, *, history: bool) -> TableSchema:
    """The table as Fivetran creates it: the tester's columns plus system columns (a table without a
    primary key gets ``_fivetran_id`` as its key)."""
    pks = list(spec.get("primary_key") or [])
    cols_spec = spec.get("columns") or {}
    for pk in pks:
        if pk not in cols_spec:
            raise ValueError(f"table {name!r}: primary key {pk!r} is not a column")
    columns = [column_from_spec(n, s, n in pks) for n, s in cols_spec.items()]
    if not pks:
        columns.append(Column(FIVETRAN_ID, FT.STRING, primary_key=True))
    if history:
        columns.append(Column(START, FT.UTC_DATETIME, primary_key=True))
        columns.append(Column(END, FT.UTC_DATETIME))
        columns.append(Column(ACTIVE, FT.BOOLEAN))
    else:
        columns.append(Column(DELETED, FT.BOOLEAN))
    columns.append(Column(SYNCED, FT.UTC_DATETIME))
    return TableSchema(name, tuple(columns))
