"""Keeping a mirrored table's Iceberg metadata the same size however many commits it mirrors.

Measured (2026-12-03, a 20-file table, one small MERGE per commit, each removing 3 files and adding 4):
pyiceberg's overwrite keeps every manifest of the parent snapshot and adds one or two, and never
merges them, and nothing deletes a superseded metadata file, manifest list or manifest. So the mirror
of one commit took 80 ms at commit 25 and 929 ms at commit 200 (201 manifests read and rewritten into
each manifest list, 818 files in `metadata/`), and a table synced every five minutes would pay seconds
per request within a day. Three things bound it:

- **Manifests merge** (`MergingOverwrite`, and pyiceberg's merge append with merging turned on by the
  table properties below): once a snapshot would list `MIN_MANIFESTS_TO_MERGE` small manifests they
  are rewritten as one, as Iceberg's Java writers do for every snapshot kind. pyiceberg 0.12 merges
  only in its merge append, so the overwrite that mirrors a Delta commit with removes is its
  `_OverwriteFiles` with the merge append's manifest processing (pinned pyiceberg; its tests run here).
- **Old metadata files go** once `METADATA_VERSIONS_KEPT` newer ones exist (Iceberg's own
  `write.metadata.previous-versions-max` bounds the metadata log to the same number).
- **Files only expired or superseded snapshots name go** (`unreferenced`): the manifest lists of
  snapshots the commit expired, the manifests only they listed, and manifests this commit wrote and
  then merged away. Decided: a file is deleted only when it is certain no retained snapshot lists it.
  Snapshots form one line (the mirror writes the main branch only) and a manifest, once left out of a
  snapshot's list, is never listed again, so the snapshots that list a manifest are consecutive: a
  manifest of an expired snapshot that some retained snapshot lists is listed by the retained
  snapshots next to the expired ones, and only their lists need reading (one or two per commit).
"""
from __future__ import annotations

import uuid
from typing import Iterable, Optional

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestContent, ManifestFile
from pyiceberg.table import TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot
from pyiceberg.table.update.snapshot import _ManifestMergeManager, _MergeAppendFiles, _OverwriteFiles

MIN_MANIFESTS_TO_MERGE = 8      # a snapshot lists at most this many small manifests (Java's default is 100)
METADATA_VERSIONS_KEPT = 10     # v<N>.metadata.json files kept before the newest: readers given an older one still find it

# The Iceberg table's own properties that make its metadata bounded (set at every mirror commit that
# finds them different, so tables mirrored before keep up).
PROPERTIES = {
    TableProperties.MANIFEST_MERGE_ENABLED: "true",
    TableProperties.MANIFEST_MIN_MERGE_COUNT: str(MIN_MANIFESTS_TO_MERGE),
    TableProperties.METADATA_PREVIOUS_VERSIONS_MAX: str(METADATA_VERSIONS_KEPT),
}


class MergingOverwrite(_OverwriteFiles):
    """pyiceberg's overwrite whose snapshot merges small manifests as its merge append does."""

    def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        properties = self._transaction.table_metadata.properties
        manager = _ManifestMergeManager(
            target_size_bytes=int(properties.get(TableProperties.MANIFEST_TARGET_SIZE_BYTES,
                                                 TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT)),
            min_count_to_merge=int(properties.get(TableProperties.MANIFEST_MIN_MERGE_COUNT, MIN_MANIFESTS_TO_MERGE)),
            merge_enabled=True, snapshot_producer=self)
        data = [m for m in manifests if m.content == ManifestContent.DATA]
        return manager.merge_manifests(data) + [m for m in manifests if m.content != ManifestContent.DATA]


def snapshot_producer(tx: Transaction, io: FileIO, summary: dict[str, str], removes: bool, commit_uuid: uuid.UUID):
    """The producer of one mirrored snapshot: an overwrite when the Delta commit removed files, else
    an append; both merge manifests, and write files named by `commit_uuid` (what `unreferenced`
    recognises as this commit's own)."""
    if removes:
        operation = Operation.OVERWRITE if tx.table_metadata.current_snapshot() is not None else Operation.APPEND
        return MergingOverwrite(operation=operation, transaction=tx, io=io, commit_uuid=commit_uuid,
                                snapshot_properties=summary)
    return _MergeAppendFiles(operation=Operation.APPEND, transaction=tx, io=io, commit_uuid=commit_uuid,
                             snapshot_properties=summary)


def neighbours(before: list[Snapshot], kept_ids: set[int]) -> list[Snapshot]:
    """The retained snapshots next to an expired one in the line of snapshots (by sequence number):
    the only retained snapshots that can list a manifest an expired one lists.
    >>> from types import SimpleNamespace as S
    >>> line = [S(snapshot_id=i, sequence_number=i) for i in range(1, 6)]
    >>> [s.snapshot_id for s in neighbours(line, {3, 4, 5})]
    [3]
    >>> [s.snapshot_id for s in neighbours(line, {1, 2, 4, 5})]
    [2, 4]
    """
    line = sorted(before, key=lambda s: s.sequence_number)
    out = []
    for i, s in enumerate(line):
        if s.snapshot_id not in kept_ids:
            continue
        prev_gone = i > 0 and line[i - 1].snapshot_id not in kept_ids
        next_gone = i + 1 < len(line) and line[i + 1].snapshot_id not in kept_ids
        if prev_gone or next_gone:
            out.append(s)
    return out


def unreferenced(expired_lists: dict[str, Iterable[str]], neighbour_manifests: Iterable[str],
                 written: Iterable[str], committed: Iterable[str]) -> frozenset[str]:
    """The files to delete after a commit (pure).

    `expired_lists`: each snapshot the commit expired, as its manifest list -> the manifests it lists;
    `neighbour_manifests`: the manifests the retained neighbours of those snapshots list;
    `written`: the manifests and manifest lists this commit wrote; `committed`: the manifest lists of
    the commit's new snapshots that are retained, and the manifests they list.
    >>> sorted(unreferenced({"l1": ["m1", "m2"]}, ["m2", "m3"], ["m3", "m4", "m5", "l2", "l3"], ["l3", "m3", "m5"]))
    ['l1', 'l2', 'm1', 'm4']
    """
    keep = set(neighbour_manifests) | set(committed)
    gone = set(expired_lists) | {m for ms in expired_lists.values() for m in ms} | set(written)
    return frozenset(gone - keep)


def expired_and_neighbours(before: TableMetadata, after: TableMetadata) -> tuple[list[Snapshot], list[Snapshot]]:
    kept = {s.snapshot_id for s in after.snapshots}
    expired = [s for s in before.snapshots if s.snapshot_id not in kept]
    return expired, (neighbours(before.snapshots, kept) if expired else [])


def new_snapshots(before: Optional[TableMetadata], after: TableMetadata) -> list[Snapshot]:
    known = {s.snapshot_id for s in before.snapshots} if before is not None else set()
    return [s for s in after.snapshots if s.snapshot_id not in known]


def old_metadata_versions(versions: Iterable[int], newest: int, kept: int = METADATA_VERSIONS_KEPT) -> list[int]:
    """The metadata versions to delete once `newest` is committed.
    >>> old_metadata_versions([1, 2, 3, 4, 5], 5, kept=2)
    [1, 2]
    """
    return sorted(v for v in versions if v < newest - kept)


__all__ = ["PROPERTIES", "MIN_MANIFESTS_TO_MERGE", "METADATA_VERSIONS_KEPT", "MergingOverwrite",
           "snapshot_producer", "unreferenced", "neighbours", "expired_and_neighbours", "new_snapshots",
           "old_metadata_versions"]
