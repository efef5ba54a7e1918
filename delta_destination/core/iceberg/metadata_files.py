"""Where a table's Iceberg metadata lives and how a new version of it is committed.

The table's own `metadata/` folder, beside `_delta_log/` (where Delta UniForm puts it), in the
layout of Iceberg's Hadoop tables, which readers without a catalog know: `v<N>.metadata.json`, one
per commit of the mirror, and `version-hint.text` holding the newest N. A reader opens
`<table>/metadata/version-hint.text` (pyiceberg `StaticTable.from_metadata("<table>")`, DuckDB
`iceberg_scan`, Spark's Hadoop catalog), or is given `<table>/metadata/v<N>.metadata.json`.

A commit is safe for two writers: `v<N+1>.metadata.json` is created with the store's put-if-absent
(`Storage.create_if_absent`: a hard link on a local disk, PutObject `If-None-Match: *` on S3, Put
Blob `If-None-Match: *` on Azure, an upload with `ifGenerationMatch=0` on GCS), which fails when the
name exists (the other writer won; this one gives up and the next request catches up from the
winner's state). The hint is replaced after that, so a crash in between leaves a hint one behind;
the mirror itself finds the newest version by listing, never trusting the hint alone.

Every file operation goes through `MetadataFolder`, over the warehouse's store client: one place per
store (storage/*.py), the same settings the Delta side uses.
"""
from __future__ import annotations

import re
from typing import Optional

from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.update import update_table_metadata

from ...storage import Storage
from .housekeeping import old_metadata_versions

METADATA_DIR = "metadata"
VERSION_HINT = "version-hint.text"
_VERSION_FILE = re.compile(r"^v(\d+)\.metadata\.json$")


def version_of(metadata_location: str) -> int:
    """
    >>> version_of("/t/metadata/v12.metadata.json"), version_of("s3://b/t/metadata/v3.metadata.json")
    (12, 3)
    """
    m = _VERSION_FILE.match(metadata_location.rstrip("/").rsplit("/", 1)[-1])
    if m is None:
        raise ValueError("not a metadata file of this layout")
    return int(m.group(1))


class MetadataFolder:
    """A table's `metadata/` folder on its store: listing, put-if-absent, the hint, deletes."""

    def __init__(self, storage: Storage, table_location: str):
        self.storage = storage
        self.table_location = table_location.rstrip("/")

    @property
    def location(self) -> str:
        return f"{self.table_location}/{METADATA_DIR}"

    def version_file(self, n: int) -> str:
        return f"{self.location}/v{n}.metadata.json"

    def names(self) -> list[str]:
        """The names of the files in the folder (none when there is no folder)."""
        return [e.name for e in self.storage.list(self.location) if not e.is_dir]

    def versions(self) -> list[int]:
        """The committed metadata versions, by listing the folder (a missing folder: none)."""
        return sorted(int(m.group(1)) for m in map(_VERSION_FILE.match, self.names()) if m)

    def newest_version(self) -> Optional[int]:
        """The newest committed metadata version, None when there is none."""
        return max(self.versions(), default=None)

    def put_if_absent(self, location: str, data: bytes) -> bool:
        """Write `data` at `location` unless something is there (False then); never a partial file."""
        self.storage.make_dirs(self.location)
        return self.storage.create_if_absent(location, data)

    def write_hint(self, n: int) -> None:
        """`version-hint.text` = n. Replaced whole (a rename on a local disk, one PUT on an object
        store): a reader sees the old hint or the new one."""
        hint = f"{self.location}/{VERSION_HINT}"
        if self.storage.is_local:
            import os
            import uuid

            tmp = f"{self.location}/.{uuid.uuid4().hex}.hint"
            self.storage.write_bytes(tmp, str(n).encode("ascii"))
            os.replace(tmp, hint)
        else:
            self.storage.write_bytes(hint, str(n).encode("ascii"))

    def delete(self, location: str) -> None:
        """One file of the folder (a missing one is fine)."""
        self.storage.delete_file(location)


class FolderCatalog(NoopCatalog):
    """The commit of a pyiceberg transaction as the next `v<N>.metadata.json` of the table's folder
    (pyiceberg needs a catalog to commit; this one is the folder itself)."""

    def __init__(self, folder: MetadataFolder):
        super().__init__("delta-destination-mirror")
        self.folder = folder

    def commit_table(self, table: Table, requirements, updates) -> CommitTableResponse:
        base = table.metadata
        for requirement in requirements:
            requirement.validate(base)
        new = update_table_metadata(base, updates, metadata_location=table.metadata_location or None)
        n = version_of(table.metadata_location) + 1 if table.metadata_location else 1
        location = self.folder.version_file(n)
        if not self.folder.put_if_absent(location, new.model_dump_json().encode("utf-8")):
            raise CommitFailedException(f"Iceberg metadata version {n} was written by another writer")
        self.folder.write_hint(n)
        for old in old_metadata_versions(self.folder.versions(), n):
            self.folder.delete(self.folder.version_file(old))
        return CommitTableResponse(metadata=new, metadata_location=location)
