"""The Iceberg metadata of a table stays the same size however many commits it mirrors
(core/iceberg/housekeeping.py): manifests merge, old metadata files and the files of expired
snapshots go, and nothing a retained snapshot or a kept metadata file names is ever deleted.

Real Delta commits (delta-rs MERGEs that remove and add files, as a writer beside the destination
makes them) mirrored by the real mirror, read back with pyiceberg's scan against delta-rs."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.serializers import FromInputFile

from delta_destination.core.iceberg.housekeeping import METADATA_VERSIONS_KEPT, MIN_MANIFESTS_TO_MERGE
from delta_destination.core.iceberg.mirror import IcebergMirror, load
from delta_destination.core.iceberg.plan import SNAPSHOTS_KEPT
from delta_destination.warehouse import Warehouse
from testkit.delta_read import delta_version
from testkit.iceberg_read import assert_every_snapshot_matches, assert_same_table

COMMITS = 40


def batch(rng, ids) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(rng.random(len(ids)))})


def named_files(location: str) -> set[str]:
    """Every file that the newest metadata's snapshots, their manifest lists and their manifests name."""
    io, names = PyArrowFileIO(), set()
    folder = os.path.join(location, "metadata")
    newest = max(int(n[1:].split(".")[0]) for n in os.listdir(folder) if n.endswith(".metadata.json"))
    metadata = FromInputFile.table_metadata(io.new_input(os.path.join(folder, f"v{newest}.metadata.json")))
    for snap in metadata.snapshots:
        names.add(snap.manifest_list)
        for manifest in snap.manifests(io):
            names.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                names.add(entry.data_file.file_path)
    return names


def test_many_commits_keep_the_metadata_bounded_and_readable(tmp_path):
    rng = np.random.default_rng(38)
    location = str(tmp_path / "s" / "t")
    for k in range(6):
        write_deltalake(location, batch(rng, np.arange(k * 500, (k + 1) * 500)), mode="append")
    mirror, warehouse = IcebergMirror(), Warehouse(str(tmp_path))
    assert mirror.mirror(warehouse, "s.t", location).outcome == "mirrored"
    counts = []
    for i in range(COMMITS):
        dt = DeltaTable(location)
        (dt.merge(batch(rng, np.concatenate([rng.choice(3000, 3, replace=False), [3000 + i]])), "t.id = s.id",
                  "s", "t").when_matched_update_all().when_not_matched_insert_all().execute())
        assert mirror.mirror(warehouse, "s.t", location).outcome == "mirrored"
        counts.append(len(os.listdir(os.path.join(location, "metadata"))))

    table = load(warehouse, location)
    assert len(table.metadata.snapshots) == SNAPSHOTS_KEPT
    assert len(table.current_snapshot().manifests(table.io)) <= MIN_MANIFESTS_TO_MERGE
    versions = [int(n[1:].split(".")[0]) for n in os.listdir(os.path.join(location, "metadata"))
                if n.startswith("v") and n.endswith(".metadata.json")]
    assert len(versions) == METADATA_VERSIONS_KEPT + 1 and max(versions) == COMMITS + 1
    # The folder stops growing: the last ten commits hold no more files than ten commits before them.
    assert max(counts[-10:]) <= max(counts[10:20]) + 2, counts
    # Nothing a retained snapshot names was deleted, and nothing is left that none names (but the metadata
    # files kept for readers given an older one, and the hint).
    folder = os.path.join(location, "metadata")
    present = {os.path.join(folder, n) for n in os.listdir(folder)}
    named = named_files(location)
    metadata_named = {p for p in named if p.startswith(folder)}
    assert metadata_named <= present, sorted(metadata_named - present)[:5]
    leftovers = {p for p in present - metadata_named
                 if not p.endswith((".metadata.json", "version-hint.text"))}
    assert not leftovers, sorted(leftovers)[:5]
    data_named = named - metadata_named
    assert all(os.path.exists(p) for p in data_named)
    # Every retained snapshot reads as the Delta version it names: the newest ten versions.
    assert assert_every_snapshot_matches(location) == list(range(delta_version(location) - SNAPSHOTS_KEPT + 1,
                                                                  delta_version(location) + 1))
    assert assert_same_table(location) == delta_version(location)


def test_a_long_catch_up_is_one_metadata_commit_with_the_newest_snapshots(tmp_path):
    """Commits made while the mirror was not running (Iceberg turned on later, another writer) come
    back in one metadata commit, each its own snapshot, of which the newest are kept."""
    rng = np.random.default_rng(7)
    location = str(tmp_path / "s" / "t")
    write_deltalake(location, batch(rng, np.arange(0, 1000)), mode="append")
    mirror, warehouse = IcebergMirror(), Warehouse(str(tmp_path))
    mirror.mirror(warehouse, "s.t", location)
    for i in range(25):
        DeltaTable(location).delete(f"id = {i * 7}")
    result = mirror.mirror(warehouse, "s.t", location)
    assert (result.outcome, result.snapshots, result.delta_version) == ("mirrored", 25, delta_version(location))
    assert assert_every_snapshot_matches(location)[-1] == delta_version(location)
    assert len(load(warehouse, location).metadata.snapshots) == SNAPSHOTS_KEPT
