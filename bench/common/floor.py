"""The floor: the same Fivetran requests applied with the bare libraries and nothing of ours.

Each batch file: AES-256-CBC (`cryptography`, the IV first, PKCS#7) -> zstd (`zstandard`) ->
`pyarrow.csv.read_csv` (its own threads, the table's types, the request's NULL marker; an update
file's unmodified columns are simply not read) -> delta-rs: the first request of a table is
`write_deltalake`, every later one ONE `merge` (upserts, the updated columns of partial updates,
deletes, by an op column). What the destination does beyond this (gRPC, the change set, the engine,
its commit guard, Spark Connect) is what a ratio to the floor measures.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pv

from delta_destination.core.model import DataType as FT, TableSchema

UPSERT, UPDATE, DELETE = 0, 1, 2


def arrow_type(c) -> pa.DataType:
    return {FT.LONG: pa.int64(), FT.INT: pa.int32(), FT.SHORT: pa.int16(), FT.DOUBLE: pa.float64(),
            FT.FLOAT: pa.float32(), FT.BOOLEAN: pa.bool_(), FT.STRING: pa.string(),
            FT.UTC_DATETIME: pa.timestamp("us", tz="UTC"),
            FT.DECIMAL: pa.decimal128(c.precision or 38, c.scale or 0)}[FT(c.type)]


def plaintext(path: str, key: Optional[bytes]) -> bytes:
    """The file's CSV bytes: decrypted and decompressed with the libraries alone."""
    import zstandard
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    data = Path(path).read_bytes()
    if key is not None:
        decryptor = Cipher(algorithms.AES(key), modes.CBC(data[:16])).decryptor()
        unpadder = padding.PKCS7(128).unpadder()
        data = unpadder.update(decryptor.update(data[16:]) + decryptor.finalize()) + unpadder.finalize()
    if path.endswith(".zst") or ".zst." in path:
        data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    return data


def read(path: str, key: Optional[bytes], schema: TableSchema, null: str, columns: Optional[list[str]] = None) -> pa.Table:
    types = {c.name: arrow_type(c) for c in schema.columns}
    wanted = columns or list(types)
    return pv.read_csv(pa.py_buffer(plaintext(path, key)),
                       convert_options=pv.ConvertOptions(column_types={c: types[c] for c in wanted}, null_values=[null],
                                                         strings_can_be_null=True, include_columns=wanted))


def full_width(part: pa.Table, schema: TableSchema, op: int) -> pa.Table:
    """`part` with every column of the table (NULL where it has none) and the op column."""
    cols = {c.name: (part.column(c.name) if c.name in part.column_names else pa.nulls(part.num_rows, arrow_type(c)))
            for c in schema.columns}
    cols["op"] = pa.array([op] * part.num_rows, pa.int8())
    return pa.table(cols)


def apply(request, schema: TableSchema, location: str, updated: list[str], storage_options=None) -> None:
    """One WriteBatchRequest as the floor applies it (see the module docstring). `updated`: the
    columns partial updates set (the workload's; a floor need not discover them)."""
    from deltalake import DeltaTable, write_deltalake

    null = request.file_params.null_string
    key = lambda p: request.keys[p] if p in request.keys else None  # noqa: E731
    parts = [full_width(read(p, key(p), schema, null), schema, UPSERT) for p in request.replace_files]
    parts += [full_width(read(p, key(p), schema, null, ["id", *updated]), schema, UPDATE) for p in request.update_files]
    parts += [full_width(read(p, key(p), schema, null, ["id"]), schema, DELETE) for p in request.delete_files]
    source = pa.concat_tables(parts)
    try:
        table = DeltaTable(location, storage_options=storage_options)
    except Exception:  # noqa: BLE001 - no table yet: the first load
        write_deltalake(location, source.drop(["op"]), storage_options=storage_options)
        return
    others = [c.name for c in schema.columns if c.name != "id"]
    (table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_update({c: f"s.{c}" for c in others}, predicate=f"s.op = {UPSERT}")
     .when_matched_update({c: f"s.{c}" for c in updated}, predicate=f"s.op = {UPDATE}")
     .when_matched_delete(predicate=f"s.op = {DELETE}")
     .when_not_matched_insert({c.name: f"s.{c.name}" for c in schema.columns}, predicate=f"s.op = {UPSERT}")
     .execute())


def same_rows(a: pa.Table, b: pa.Table) -> bool:
    """Equal as sets of rows by `id` (column order and Arrow types aside)."""
    if a.num_rows != b.num_rows or set(a.column_names) != set(b.column_names):
        return False
    cols = sorted(a.column_names)
    a = a.select(cols).sort_by("id")
    b = b.select(cols).sort_by("id")
    return all(pc.all(pc.equal(pc.fill_null(a.column(c).cast(pa.string()), "\0NULL"),
                               pc.fill_null(b.column(c).cast(pa.string()), "\0NULL"))).as_py() in (True, None)
               for c in cols)
