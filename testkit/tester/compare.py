"""What the server did, against the reference model: DescribeTable's columns against the model's
schema, and a Delta table read back from disk (with delta-rs, independently of Spark) against the
model's rows."""
from __future__ import annotations

from typing import Optional

import pyarrow as pa

from delta_destination.core.model import Column, DataType as FT, TableSchema
from delta_destination.core.types import arrow_type
from delta_destination.storage import StorageOptions
from delta_destination.core.table_dirs import table_location
from delta_destination.warehouse import Warehouse, normalise_root
from testkit.delta_read import read_delta_table
from .reference_model import ModelTable
from .values import normalize, sort_key


def type_name(c: Column) -> str:
    """A column's type as the reports spell it: DECIMAL(p,s), or the type's name."""
    if c.type == FT.DECIMAL and c.precision is not None:
        return f"DECIMAL({c.precision},{c.scale})"
    return FT(c.type).name


def _column_problems(name: str, actual: Column, expected: Column) -> list[str]:
    problems = []
    if FT(actual.type) != FT(expected.type):
        problems.append(f"column {name!r}: type {type_name(actual)}, expected {type_name(expected)}")
    elif expected.type == FT.DECIMAL:
        if actual.precision is None:
            problems.append(f"column {name!r}: DECIMAL without params, expected {type_name(expected)}")
        elif (actual.precision, actual.scale) != expected.decimal_params():
            problems.append(f"column {name!r}: {type_name(actual)}, expected {type_name(expected)}")
    if bool(actual.primary_key) != bool(expected.primary_key):
        problems.append(f"column {name!r}: primary_key={actual.primary_key}, expected {expected.primary_key}")
    return problems


def compare_schema(expected: TableSchema, actual_columns: list[Column]) -> list[str]:
    """Why DescribeTable's columns are not the model's: missing, unexpected, other type or key."""
    problems = []
    actual = {c.name: c for c in actual_columns}
    for e in expected.columns:
        a = actual.get(e.name)
        if a is None:
            problems.append(f"column {e.name!r} missing (expected {type_name(e)})")
        else:
            problems += _column_problems(e.name, a, e)
    problems += [f"unexpected column {n!r} ({type_name(c)})" for n, c in actual.items() if not expected.has(n)]
    return problems


def _show_row(row: dict, columns: list[str]) -> str:
    return "{" + ", ".join(f"{c}={row.get(c)!r}" for c in columns) + "}"


def _by_key(items: dict) -> list:
    return sorted(items.items(), key=lambda kv: [sort_key(v) for v in kv[0]])


def _row_differences(t: ModelTable, disk_by_key: dict[tuple, list[dict]]) -> list[str]:
    cols, key_cols = t.schema.column_names, t.row_key_columns
    problems = [f"duplicate key {dict(zip(key_cols, k))}: {len(rs)} rows on disk"
                for k, rs in _by_key(disk_by_key) if len(rs) > 1]
    for k, exp in _by_key(t.rows):
        got = disk_by_key.get(k)
        if not got:
            problems.append(f"missing row {_show_row(exp, cols)}")
            continue
        diffs = [f"{c}: got {got[0].get(c)!r}, expected {exp.get(c)!r}" for c in cols if got[0].get(c) != exp.get(c)]
        if diffs:
            problems.append(f"row {dict(zip(key_cols, k))} differs: " + "; ".join(diffs))
    problems += [f"extra row {_show_row(rs[0], cols)}" for k, rs in _by_key(disk_by_key) if k not in t.rows]
    return problems


def compare_rows(t: ModelTable, disk_rows: list[dict]) -> list[str]:
    """Row-by-row comparison of the model with what was read back."""
    cols = t.schema.column_names
    expected = {tuple(r.get(c) for c in cols) for r in t.rows.values()}
    actual = [tuple(r.get(c) for c in cols) for r in disk_rows]
    if expected == set(actual) and len(actual) == len(expected):
        return []
    disk_by_key: dict[tuple, list[dict]] = {}
    for r in disk_rows:
        disk_by_key.setdefault(tuple(r.get(c) for c in t.row_key_columns), []).append(r)
    return _row_differences(t, disk_by_key) or ["row multisets differ (no per-key difference found)"]


def warehouse_of(warehouse, storage_options: Optional[dict] = None) -> Warehouse:
    """The destination's view of the warehouse, reached with delta-rs-style options (AWS_* keys,
    GCS's google_service_account_key / google_application_credentials, or Azure's azure_storage_*:
    an `azure_storage_endpoint` of `<emulator URL>/<account>` is an emulator's)."""
    from delta_destination.storage import AzureOptions, GcsOptions, S3Options

    o = storage_options or {}
    gcs = GcsOptions(service_account_key=o.get("google_service_account_key", ""),
                     credentials_file=o.get("google_application_credentials", ""))
    account, endpoint = o.get("azure_storage_account_name", ""), o.get("azure_storage_endpoint", "").rstrip("/")
    if account and endpoint.endswith("/" + account):
        endpoint = endpoint[:-len(account) - 1]   # an emulator addresses the account in the path
    azure = AzureOptions(account_name=account, account_key=o.get("azure_storage_account_key", ""),
                         sas_token=o.get("azure_storage_sas_token", ""), use_emulator=bool(endpoint),
                         emulator_url=endpoint)
    s3 = S3Options(endpoint=o.get("AWS_ENDPOINT_URL", ""), region=o.get("AWS_REGION", ""),
                   access_key_id=o.get("AWS_ACCESS_KEY_ID", ""), secret_access_key=o.get("AWS_SECRET_ACCESS_KEY", ""))
    options = StorageOptions(s3=s3, gcs=gcs, azure=azure)
    return Warehouse(normalise_root(str(warehouse)), options)


def table_path(warehouse, schema: str, table: str, storage_options: Optional[dict] = None) -> str:
    """Where the destination keeps a table (its warehouse layout spells names as directories)."""
    return table_location(warehouse_of(warehouse, storage_options), schema, table)


def _arrow_equivalent(a: pa.DataType, b: pa.DataType) -> bool:
    """Equal up to the large/view spellings of string and binary (delta-rs may read either)."""
    def canon(t):
        if pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return pa.string()
        if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
            return pa.binary()
        return t

    return canon(a) == canon(b)


def _stored_type_problems(t: ModelTable, arrow: pa.Table) -> list[str]:
    fields = {f.name: f for f in arrow.schema}
    problems = []
    for c in t.schema.columns:
        f = fields.get(c.name)
        if f is None:
            problems.append(f"column {c.name!r} missing on disk")
        elif not _arrow_equivalent(f.type, arrow_type(c)):
            problems.append(f"column {c.name!r} stored as {f.type}, expected {arrow_type(c)}")
    return problems + [f"unexpected column {n!r} on disk" for n in fields if not t.schema.has(n)]


def _normalized_row(t: ModelTable, raw: dict, problems: list[str]) -> dict:
    row = {}
    for c in t.schema.columns:
        v = raw.get(c.name)
        try:
            row[c.name] = normalize(c, v)
        except Exception as e:  # noqa: BLE001
            problems.append(f"column {c.name!r}: cannot read back value {v!r}: {e}")
            row[c.name] = v
    return row


def read_back(warehouse: str, schema: str, t: ModelTable,
              storage_options: Optional[dict] = None) -> tuple[list[dict], list[str]]:
    """Read a table from disk or object storage (independently of Spark) and normalise its values."""
    path = table_path(warehouse, schema, t.schema.name, storage_options)
    try:
        arrow = read_delta_table(path, storage_options)
    except Exception as e:  # noqa: BLE001
        return [], [f"cannot read Delta table at {path}: {type(e).__name__}: {e}"]
    problems = _stored_type_problems(t, arrow)
    rows = [_normalized_row(t, raw, problems) for raw in arrow.to_pylist()]
    return rows, problems
