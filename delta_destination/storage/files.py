"""What every store's client offers the destination for its own files (listing, reading,
writing staged Parquet, removing its private areas), and how a location's scheme is read.
Table data is written by the engines only; no store's client writes into a table."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable

import pyarrow as pa

# Staged Parquet parts encoded at once: one per core, at most 4 (each holds one part's buffer).
PARQUET_PART_WRITERS = max(1, min(4, os.cpu_count() or 1))

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/")


def url_scheme(path: str) -> str:
    """A URL's scheme ('' for a local path); `dbfs:/x`, with one slash, is a URL too.
    >>> url_scheme("s3a://b/k"), url_scheme("/data/wh"), url_scheme("file:///x"), url_scheme("dbfs:/mnt/wh")
    ('s3a', '', 'file', 'dbfs')
    """
    m = _SCHEME.match(path)
    return m.group(1).lower() if m else ""


def is_url(path: str) -> bool:
    return bool(url_scheme(path))


@dataclass(frozen=True)
class Entry:
    location: str
    is_dir: bool
    size: int
    mtime: float   # seconds since the epoch (0 when the store does not say)

    @property
    def name(self) -> str:
        return self.location.rstrip("/").rsplit("/", 1)[-1]


class Storage:
    """Files under canonical locations of one kind of store, with one configuration: each store's
    module subclasses it (local.py, s3.py, azure.py, gcs.py); `stores.storage_for(root, options)`
    gives the one the store table names for the root's scheme."""

    def __init__(self, root: str, options):
        """`root`: canonical (stores.canonical); `options`: a StorageOptions."""
        self.root = root
        self.scheme = url_scheme(self.root)
        self.options = options

    is_local = False
    can_list = False   # can the destination itself list and remove files here (else only the engine can)?
    # Staged Parquet parts are read once; compressing them pays where bytes travel (uploads).
    staging_compression = "snappy"

    @staticmethod
    def parent(location: str) -> str:
        return location.rstrip("/").rsplit("/", 1)[0]

    def list(self, location: str, recursive: bool = False) -> list[Entry]:
        """The entries directly under `location` (all files below it when `recursive`); a missing
        location is empty."""
        raise NotImplementedError

    def exists(self, location: str) -> bool:
        raise NotImplementedError

    def read_bytes(self, location: str) -> bytes:
        raise NotImplementedError

    def write_bytes(self, location: str, data: bytes) -> None:
        raise NotImplementedError

    def make_dirs(self, location: str) -> None:
        """A directory and its parents (object stores have no directories: nothing)."""

    def make_private_dir(self, location: str) -> None:
        """A directory only this user can read (object stores have no directories: nothing)."""

    def create_if_absent(self, location: str, data: bytes) -> bool:
        """Write `data` at `location` in one conditional create that fails when something is there
        (False then, the existing object untouched; never a partial object): what makes a commit of
        a new file safe for two writers (core/iceberg/metadata_files.py). A store that cannot do it
        with its settings says why in `Store.create_if_absent_refusal`, checked with the settings."""
        raise NotImplementedError

    def delete_file(self, location: str) -> None:
        raise NotImplementedError

    def delete_tree(self, location: str) -> None:
        """Everything under `location`, quietly (a missing location is fine)."""
        raise NotImplementedError

    def rename_dir(self, src: str, dst: str) -> None:
        """An atomic directory rename (local disks only: object stores have none)."""
        raise ValueError(f"{self.scheme or 'this'} storage cannot rename directories")

    def write_parquet_parts(self, location: str, parts: Iterable[pa.Table]) -> None:
        """Staged batch parts, one Parquet file each, in a private folder (timestamps in
        microseconds, as the engines and delta-rs read them). Parts are encoded and written on
        a few threads at once: pyarrow's Parquet writer is single-threaded per file and
        releases the GIL, and on an object store each part is its own upload."""
        import io
        import itertools
        from concurrent.futures import ThreadPoolExecutor

        import pyarrow.parquet as pq

        self.make_private_dir(location)

        def write(i: int, part: pa.Table) -> None:
            buf = io.BytesIO()
            pq.write_table(part, buf, coerce_timestamps="us", allow_truncated_timestamps=False,
                           compression=self.staging_compression)
            self.write_bytes(f"{location.rstrip('/')}/part-{i:05d}.parquet", buf.getvalue())

        with ThreadPoolExecutor(max_workers=PARQUET_PART_WRITERS, thread_name_prefix="stage-parquet") as pool:
            list(pool.map(write, itertools.count(), parts))   # list(): the first error is raised

    def delete_table_files(self, location: str) -> None:
        """A table's files, its log last (docs/object-storage.md, "Removing a table"): a drop has
        emptied the table with one commit first, so while the data files go the log still says
        what the table is, a valid table with no rows. Then the log, then whatever is left
        (folder markers: `delete_tree` removes every object under the location, and the location's
        own object)."""
        log_dir = f"{location.rstrip('/')}/_delta_log"
        for entry in self.list(location):
            if entry.location.rstrip("/") == log_dir:
                continue
            if entry.is_dir:
                self.delete_tree(entry.location)
            else:
                self.delete_file(entry.location)
        self.delete_tree(log_dir)
        self.delete_tree(location)
