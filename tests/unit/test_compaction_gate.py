"""The gate in front of the destination's own compaction (core/compaction.py): the protocols of real
tables, as delta-rs writes them: without features, or with deletion vectors, they pass; with column
mapping they are refused."""
from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from delta_destination.core.compaction import writable_as_is


def _gate(location) -> bool:
    p = DeltaTable(str(location)).protocol()
    return writable_as_is(p.min_reader_version, p.min_writer_version, p.writer_features, p.reader_features)


def test_only_features_delta_rs_keeps_pass(tmp_path):
    write_deltalake(str(tmp_path / "plain"), pa.table({"id": [1]}))
    # delta-rs's own deletion-vector tables also carry variantType, which the gate does not know.
    write_deltalake(str(tmp_path / "dv"), pa.table({"id": [1]}),
                    configuration={"delta.enableDeletionVectors": "true"})
    write_deltalake(str(tmp_path / "cm"), pa.table({"id": [1]}),
                    configuration={"delta.columnMapping.mode": "name"})
    assert _gate(tmp_path / "plain")
    assert not _gate(tmp_path / "dv")
    assert not _gate(tmp_path / "cm")
    # What Sail 0.7.2 gives a table when deletion vectors are turned on (measured).
    assert writable_as_is(3, 7, ["appendOnly", "invariants", "deletionVectors"], ["deletionVectors"])
