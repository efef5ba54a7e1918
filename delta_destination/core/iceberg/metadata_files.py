"""Where a table's Iceberg metadata lives and how a new version of it is committed.

The table's own `metadata/` folder, beside `_delta_log/` (where Delta UniForm puts it), in the
layout of Iceberg's Hadoop tables, which readers without a catalog know: `v<N>.metadata.json`, one
per commit of the mirror, and `version-hint.text` holding the newest N. A reader opens
`<table>/metadata/version-hint.text` (pyiceberg `StaticTable.from_metadata("<table>")`, DuckDB
`iceberg_scan`, Spark's Hadoop catalog), or is given `<table>/metadata/v<N>.metadata.json`.

A commit is safe for two writers: `v<N+1>.metadata.json` is written to a temporary name and linked
to its final name, which fails when the name exists (put-if-absent: the other writer won; this one
gives up and the next request catches up from the winner's state). The hint is replaced after
that, so a crash in between leaves a hint one behind; the mirror itself finds the newest version by
listing, never trusting the hint alone.

Local-disk warehouses only so far (settings.py refuses the setting elsewhere).
"""
from __future__ import annotations

import os
import re
import uuid
from typing import Optional

from pyiceberg.catalog.noop import NoopCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.update import update_table_metadata

from .housekeeping import old_metadata_versions

METADATA_DIR = "metadata"
VERSION_HINT = "version-hint.text"
_VERSION_FILE = re.compile(r"^v(\d+)\.metadata\.json$")


def metadata_dir(table_location: str) -> str:
    return os.path.join(table_location, METADATA_DIR)


def version_file(table_location: str, n: int) -> str:
    return os.path.join(metadata_dir(table_location), f"v{n}.metadata.json")


def metadata_names(table_location: str) -> list[str]:
    """The names of the files in the table's metadata folder (none when there is no folder)."""
    try:
        return os.listdir(metadata_dir(table_location))
    except FileNotFoundError:
        return []


def metadata_versions(table_location: str) -> list[int]:
    return [int(m.group(1)) for m in map(_VERSION_FILE.match, metadata_names(table_location)) if m]


def newest_version(table_location: str) -> Optional[int]:
    """The newest committed metadata version (by listing the folder), None when there is none."""
    return max(metadata_versions(table_location), default=None)


def version_of(metadata_location: str) -> int:
    """
    >>> version_of("/t/metadata/v12.metadata.json")
    12
    """
    m = _VERSION_FILE.match(os.path.basename(metadata_location))
    if m is None:
        raise ValueError("not a metadata file of this layout")
    return int(m.group(1))


def put_if_absent(path: str, data: bytes) -> bool:
    """Write `data` at `path` unless something is there (False then); never a partial file."""
    tmp = os.path.join(os.path.dirname(path), f".{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def write_hint(table_location: str, n: int) -> None:
    tmp = os.path.join(metadata_dir(table_location), f".{uuid.uuid4().hex}.hint")
    with open(tmp, "w") as out:
        out.write(str(n))
    os.replace(tmp, os.path.join(metadata_dir(table_location), VERSION_HINT))


class FolderCatalog(NoopCatalog):
    """The commit of a pyiceberg transaction as the next `v<N>.metadata.json` of the table's folder
    (pyiceberg needs a catalog to commit; this one is the folder itself)."""

    def __init__(self, table_location: str):
        super().__init__("delta-destination-mirror")
        self.table_location = table_location

    def commit_table(self, table: Table, requirements, updates) -> CommitTableResponse:
        base = table.metadata
        for requirement in requirements:
            requirement.validate(base)
        new = update_table_metadata(base, updates, metadata_location=table.metadata_location or None)
        n = version_of(table.metadata_location) + 1 if table.metadata_location else 1
        location = version_file(self.table_location, n)
        os.makedirs(metadata_dir(self.table_location), exist_ok=True)
        if not put_if_absent(location, new.model_dump_json().encode("utf-8")):
            raise CommitFailedException(f"Iceberg metadata version {n} was written by another writer")
        write_hint(self.table_location, n)
        for old in old_metadata_versions(metadata_versions(self.table_location), n):
            try:
                os.remove(version_file(self.table_location, old))
            except FileNotFoundError:
                pass
        return CommitTableResponse(metadata=new, metadata_location=location)
