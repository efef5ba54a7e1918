"""The gate in front of the destination's own compaction (core/compaction.py): the protocol of a
real table with deletion vectors, as delta-rs writes it, is refused; a table without features passes."""
from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from delta_destination.core.compaction import writable_as_is


def _gate(location) -> bool:
    p = DeltaTable(str(location)).protocol()
    return writable_as_is(p.min_reader_version, p.min_writer_version, p.writer_features)


def test_a_table_with_deletion_vectors_is_not_compacted_by_the_destination(tmp_path):
    write_deltalake(str(tmp_path / "dv"), pa.table({"id": [1]}),
                    configuration={"delta.enableDeletionVectors": "true"})
    write_deltalake(str(tmp_path / "plain"), pa.table({"id": [1]}))
    assert not _gate(tmp_path / "dv")
    assert _gate(tmp_path / "plain")
