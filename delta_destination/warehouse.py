"""The warehouse: the one place that knows where tables live and how paths are spelled.

A table lives at `<warehouse>/<schema dir>/<table dir>`, each directory name spelled by
`path_component` from the Fivetran name: ASCII letters, digits, `_`, `-` and `.` stay as
they are (so `orders`, `Order_Items-2024.v1` are their own directory names); every other
character, and a leading `.`, becomes `=XX` per UTF-8 byte (quoted-printable style:
`Order Items` -> `Order=20Items`, `Größe` -> `Gr=C3=B6=C3=9Fe`, `a=b` -> `a=3Db`). The
result is injective, readable, and never depends on how an engine escapes paths: it holds
only characters that Sail, Apache Spark/Hadoop and object stores all take literally
(Sail percent-encodes spaces and non-ASCII, treats `?`, `#`, `*`, `{` specially).
A spelled name longer than MAX_COMPONENT characters keeps a readable prefix and ends in
`==` + a hash of the name ignoring case + a hash of the exact name (still injective,
and case twins stay detectable). Tables created before this layout whose names had other
characters the engine kept literally (`$`, `+`, `@` ...) are still found at their old
directory (legacy_location).

The warehouse is a local directory or a
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
import hashlib
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Iterator, Optional

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


def commit_files(location: str) -> list[str]:
    """The paths of a local Delta table's commit files (`_delta_log/<20 digits>.json`)."""
    log_dir = os.path.join(location, "_delta_log")
    try:
        names = os.listdir(log_dir)
    except OSError:
        return []
    return [os.path.join(log_dir, n) for n in names if n.endswith(".json") and n[:20].isdigit()]


def has_commits(location: str) -> bool:
    """A local Delta table exists once its log holds a commit."""
    return bool(commit_files(location))


def last_commit_time(location: str) -> float:
    """When a local table was last written (0 when it has no commits)."""
    times = []
    for path in commit_files(location):
        try:
            times.append(os.path.getmtime(path))
        except OSError:  # removed by log clean-up meanwhile
            continue
    return max(times, default=0.0)


def remove_failed_create(location: str) -> None:
    """A crash during CREATE can leave a local directory without commits or data: remove it."""
    if is_url(location) or not os.path.isdir(location):
        return
    has_commit = has_commits(location)
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


_LITERAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
ESCAPE = "="
HASHED = "=="  # cannot occur in a spelled name: every "=" there is followed by two hex digits
MAX_COMPONENT = 255  # characters (= bytes: all ASCII), the usual filesystem limit per component
_PREFIX = 200


def path_component(name: str) -> str:
    """>>> path_component("Order Items"), path_component(".x"), path_component("a=b")
    ('Order=20Items', '=2Ex', 'a=3Db')
    """
    out = []
    for i, ch in enumerate(name):
        if ch in _LITERAL and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.extend(f"{ESCAPE}{b:02X}" for b in ch.encode("utf-8"))
    spelled = "".join(out)
    if len(spelled) <= MAX_COMPONENT:
        return spelled
    prefix = spelled[:_PREFIX]
    cut = prefix.rfind(ESCAPE, _PREFIX - 2)  # never split an "=XX"
    if cut != -1:
        prefix = prefix[:cut]
    return prefix + HASHED + _digest(name.casefold()) + _digest(name)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def name_of_component(component: str) -> Optional[str]:
    """The name a directory spells, or None (a hashed long name, or not our spelling)."""
    if HASHED in component:
        return None
    data, i = bytearray(), 0
    while i < len(component):
        ch = component[i]
        if ch == ESCAPE:
            try:
                data.append(int(component[i + 1:i + 3], 16))
            except ValueError:
                return None
            i += 3
        elif ch in _LITERAL:
            data += ch.encode("ascii")
            i += 1
        else:
            return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def same_ignoring_case(component: str, name: str) -> bool:
    """Does the directory `component` hold a name equal to `name` ignoring case?"""
    mine = path_component(name)
    if HASHED in component or HASHED in mine:
        return HASHED in component and HASHED in mine and \
            component.split(HASHED)[1][:16] == mine.split(HASHED)[1][:16]
    other = name_of_component(component)
    return other is not None and other.casefold() == name.casefold()


def directory_name(kind: str, name: str) -> str:
    """The path component for a schema or table name (refused when unsafe or reserved)."""
    check_path_name(kind, name)
    if kind == "schema" and name in RESERVED_SCHEMAS:
        raise UnsafeName(f"{kind} name {name!r} is reserved for the destination's own files")
    return path_component(name)


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
        location = self.join(directory_name("schema", schema), directory_name("table", table))
        legacy = self.legacy_location(schema, table)
        if legacy is not None and not has_commits(location) and has_commits(legacy):
            return legacy
        return location

    def legacy_location(self, schema: str, table: str) -> Optional[str]:
        """Where a table with this name was created before names were spelled (raw names as
        directories), when that differs; local warehouses only. Names with "=" are left out:
        their raw spelling could be another table's new one."""
        if not self.is_local or ESCAPE in schema + table or table.startswith(TMP_PREFIX):
            return None
        if path_component(schema) == schema and path_component(table) == table:
            return None
        if len(schema.encode("utf-8")) > 255 or len(table.encode("utf-8")) > 255:
            return None
        return os.path.join(self.root, schema, table)

    def case_twin(self, schema: str, table: str) -> Optional[str]:
        """Another table of the schema whose name equals `table` ignoring case (its directory
        name), or None. Spark and most catalogs and readers resolve names case-insensitively,
        so such a pair is refused. Local warehouses only (object stores are not listed)."""
        if not self.is_local:
            return None
        sdir = self.schema_location(schema)
        mine = path_component(table)
        try:
            entries = os.listdir(sdir)
        except OSError:
            return None
        for entry in sorted(entries):
            if entry != mine and same_ignoring_case(entry, table) and has_commits(os.path.join(sdir, entry)):
                return entry
        return None

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
