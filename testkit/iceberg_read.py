"""Read a table's Iceberg metadata back as an Iceberg reader does (pyiceberg's own scan, from the
metadata location a reader is given: `<table>/metadata/version-hint.text`), and compare it with the
same table read as Delta (delta-rs QueryBuilder, testkit.delta_read) at the Delta version each
snapshot names: rows, column names and types."""
from __future__ import annotations

from typing import Optional

import pyarrow as pa
from pyiceberg.table import StaticTable

from testkit.delta_read import delta_version, read_delta_table

DELTA_VERSION = "delta-version"
_IO: dict[str, dict] = {}


def register_iceberg_io(prefix: str, properties: dict) -> None:
    """Open tables under `prefix` (e.g. "s3://bucket/") with these pyiceberg FileIO properties, as a
    reader of that store is told to (docs/iceberg.md)."""
    _IO[prefix] = dict(properties)


def iceberg_table(path: str) -> StaticTable:
    """The table as a reader without a catalog opens it: from its version hint."""
    properties = next((o for p, o in _IO.items() if str(path).startswith(p)), {})
    return StaticTable.from_metadata(str(path), properties)


def mirrored_version(path: str, snapshot_id: Optional[int] = None) -> int:
    t = iceberg_table(path)
    snap = t.snapshot_by_id(snapshot_id) if snapshot_id is not None else t.current_snapshot()
    return int(snap.summary[DELTA_VERSION])


def read_iceberg_table(path: str, snapshot_id: Optional[int] = None) -> pa.Table:
    t = iceberg_table(path)
    return t.scan(snapshot_id=snapshot_id).to_arrow() if snapshot_id is not None else t.scan().to_arrow()


def as_iceberg_types(t: pa.Table) -> pa.Table:
    """A Delta read with the Arrow types an Iceberg read gives for them: Iceberg has no 8- or 16-bit
    integers (Delta's byte and short are Iceberg ints)."""
    fields = [pa.field(f.name, pa.int32()) if f.type in (pa.int8(), pa.int16()) else f for f in t.schema]
    return t.cast(pa.schema(fields))


def logical_type(t: pa.DataType) -> str:
    """An Arrow type without its offset width (pyiceberg reads strings and binaries as large ones)."""
    return str({pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}.get(t, t))


def key_of(row: dict, keys) -> tuple:
    return tuple((row[k] is None, row[k]) for k in keys)


def assert_same_table(path: str, keys=("id",), snapshot_id: Optional[int] = None) -> int:
    """The Iceberg read (current snapshot, or `snapshot_id`) equals the Delta read at the version the
    snapshot names; returns that version."""
    version = mirrored_version(path, snapshot_id)
    delta = as_iceberg_types(read_delta_table(str(path), version=version))
    ice = read_iceberg_table(path, snapshot_id)
    assert ice.column_names == delta.column_names, (ice.column_names, delta.column_names)
    assert [logical_type(f.type) for f in ice.schema] == [logical_type(f.type) for f in delta.schema], \
        (ice.schema, delta.schema)
    got = sorted(ice.to_pylist(), key=lambda r: key_of(r, keys))
    want = sorted(delta.to_pylist(), key=lambda r: key_of(r, keys))
    assert got == want, f"Iceberg rows differ from Delta version {version}"
    return version


def assert_in_step(path: str, keys=("id",)) -> int:
    """The Iceberg side mirrors the Delta table's newest version and reads the same; returns the version."""
    version = assert_same_table(path, keys)
    assert version == delta_version(path)
    return version


def assert_every_snapshot_matches(path: str, keys=("id",)) -> list[int]:
    """Time travel: each snapshot's rows equal the Delta version its summary names; returns the versions."""
    versions = []
    for snap in iceberg_table(path).snapshots():
        versions.append(assert_same_table(path, keys, snap.snapshot_id))
    return versions


def newest_metadata(path: str) -> str:
    """The newest `metadata/v<N>.metadata.json` of a table folder on local disk."""
    import os
    versions = [int(n[1:-len(".metadata.json")]) for n in os.listdir(f"{path}/metadata")
                if n.startswith("v") and n.endswith(".metadata.json")]
    return f"{path}/metadata/v{max(versions)}.metadata.json"


def catalog_reader(name: str, db) -> "SqlCatalog":
    """A reader's own pyiceberg SqlCatalog over a SQLite catalog file (not the destination's object)."""
    from pyiceberg.catalog.sql import SqlCatalog
    return SqlCatalog(name, uri=f"sqlite:///{db}")


def assert_catalog_in_step(catalog, schema: str, name: str, path: str, keys=("id",)) -> int:
    """The table loaded by name from an Iceberg catalog names the folder's newest metadata file and
    reads as the Delta table at its newest version; returns that version."""
    t = catalog.load_table((schema, name))
    assert t.metadata_location == newest_metadata(path), (t.metadata_location, newest_metadata(path))
    version = int(t.current_snapshot().summary[DELTA_VERSION])
    assert version == delta_version(path)
    delta = as_iceberg_types(read_delta_table(path, version=version))
    ice = t.scan().to_arrow()
    assert ice.column_names == delta.column_names
    assert [logical_type(f.type) for f in ice.schema] == [logical_type(f.type) for f in delta.schema]
    assert sorted(ice.to_pylist(), key=lambda r: key_of(r, keys)) == \
        sorted(delta.to_pylist(), key=lambda r: key_of(r, keys))
    return version
