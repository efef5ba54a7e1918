"""The warehouse: the one place that knows where tables live and how paths are spelled.

A table lives at `<warehouse>/<schema>/<table>`. The warehouse is a local directory or a
storage URL (s3a://, gs://, abfss:// ... as the Spark engine sees it). Directory moves
(drop/rename/copy of tables, clean-up of leftovers) are only possible on a local
directory; callers ask `is_local` before offering them.

Internal areas live at the warehouse root: `_fivetran_staging/` (big batches staged on
their way to a MERGE) and `_fivetran_trash/` (dropped tables before their files are
deleted); half-written table copies are hidden next to their target as
`.fivetran_tmp_<token>`. Start-up removes them, so names that would land on them are
refused as schema/table names.
"""
from __future__ import annotations

import glob
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Iterator

from .core.errors import UnsafeName
from .core.names import check_path_name

STAGING_DIR = "_fivetran_staging"
TRASH_DIR = "_fivetran_trash"
TMP_PREFIX = ".fivetran_tmp_"
STALE_TMP_SECONDS = 24 * 3600


def is_url(path: str) -> bool:
    return "://" in path


def normalise_root(path: str) -> str:
    if is_url(path):
        return path.rstrip("/")
    return os.path.abspath(os.path.expanduser(path))


RESERVED_SCHEMAS = (STAGING_DIR, TRASH_DIR)


def has_commits(location: str) -> bool:
    """A local Delta table exists once its log holds a commit."""
    log_dir = os.path.join(location, "_delta_log")
    if not os.path.isdir(log_dir):
        return False
    return any(n.endswith(".json") and n[:20].isdigit() for n in os.listdir(log_dir))


def remove_failed_create(location: str) -> None:
    """A crash during CREATE can leave a local directory without commits or data: remove it."""
    if is_url(location) or not os.path.isdir(location):
        return
    log_dir = os.path.join(location, "_delta_log")
    has_commit = os.path.isdir(log_dir) and any(n.endswith(".json") for n in os.listdir(log_dir))
    has_data = any(n.endswith(".parquet") for n in os.listdir(location))
    if not has_commit and not has_data:
        shutil.rmtree(location, ignore_errors=True)


def hidden_sibling(location: str) -> str:
    """A hidden directory next to `location`, for a table written before it is moved in."""
    return os.path.join(os.path.dirname(location), TMP_PREFIX + uuid.uuid4().hex)


def clean_stale_hidden(parent: str) -> None:
    """Hidden copies left by a crash are removed after a day (a running copy is much younger)."""
    cutoff = time.time() - STALE_TMP_SECONDS
    for path in glob.glob(os.path.join(glob.escape(parent), TMP_PREFIX + "*")):
        try:
            if os.path.getmtime(path) < cutoff:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def directory_name(kind: str, name: str) -> str:
    """The path component for a schema or table name (refused when unsafe or reserved)."""
    check_path_name(kind, name)
    if (kind == "schema" and name in RESERVED_SCHEMAS) or name.startswith(TMP_PREFIX):
        raise UnsafeName(f"{kind} name {name!r} is reserved for the destination's own files")
    return name


@dataclass(frozen=True)
class Warehouse:
    root: str

    @property
    def is_local(self) -> bool:
        return not is_url(self.root)

    def join(self, *parts: str) -> str:
        if self.is_local:
            return os.path.join(self.root, *parts)
        return "/".join([self.root.rstrip("/"), *parts])

    def schema_location(self, schema: str) -> str:
        return self.join(directory_name("schema", schema))

    def table_location(self, schema: str, table: str) -> str:
        return self.join(directory_name("schema", schema), directory_name("table", table))

    # ---- internal areas -------------------------------------------------------------------
    def new_staging_location(self) -> str:
        return self.join(STAGING_DIR, uuid.uuid4().hex)

    def remove_staging(self, location: str) -> None:
        if self.is_local:
            shutil.rmtree(location, ignore_errors=True)

    def trash(self) -> str:
        return self.join(TRASH_DIR)

    def clean_leftovers(self) -> None:
        """At start-up nothing is in flight: remove what a crash left (staged batches,
        dropped tables in the trash, hidden half-written copies)."""
        if not self.is_local or not os.path.isdir(self.root):
            return
        shutil.rmtree(self.join(STAGING_DIR), ignore_errors=True)
        shutil.rmtree(self.join(TRASH_DIR), ignore_errors=True)
        for path in glob.glob(os.path.join(glob.escape(self.root), "*", TMP_PREFIX + "*")):
            shutil.rmtree(path, ignore_errors=True)

    # ---- local directory operations ------------------------------------------------------
    def table_locations(self) -> Iterator[tuple[str, str, str]]:
        """(schema directory, table directory, location) of every local Delta table."""
        if not self.is_local or not os.path.isdir(self.root):
            return
        for schema in sorted(os.listdir(self.root)):
            sdir = os.path.join(self.root, schema)
            if schema.startswith((".", "_fivetran_")) or not os.path.isdir(sdir):
                continue
            for table in sorted(os.listdir(sdir)):
                tdir = os.path.join(sdir, table)
                if not table.startswith(".") and has_commits(tdir):
                    yield schema, table, tdir
