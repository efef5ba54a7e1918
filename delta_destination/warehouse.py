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
directory (legacy_location, local warehouses).

The warehouse root is a local directory or an object-store URL (`s3://bucket/prefix`; see
storage.py). The destination lists and removes files there itself; directory renames exist
only on a local disk (`can_rename`), and callers choose their design by it.

The destination's private areas live at the root and are named after the process that
made them (`owner_id`: host, pid), so that several destination processes can share one
warehouse: `_fivetran_staging/<owner>-<uuid>/` (big batches staged on their way to a
statement; setup probes), `_fivetran_trash/` (local: dropped tables before their files are
deleted; everywhere: `<owner>-<uuid>.json` notes of removals to finish after a crash).
Half-written table copies on a local disk are hidden next to their target as
`.fivetran_tmp_<token>`. What a dead process left is removed at the next start and before
the next staged write (`clean_leftovers`); names that would land on these areas are
refused as schema names.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Iterator, Optional

import pyarrow as pa

from .errors import UnsafeName
from .names import check_path_name
from .processes import pid_alive
from .storage import (Entry, Storage, StorageOptions, canonical, delta_rs_options, is_url, storage_for, store_for,
                      url_scheme)

STAGING_DIR = "_fivetran_staging"
TRASH_DIR = "_fivetran_trash"
PROBE_PREFIX = "_fivetran_probe_"
TMP_PREFIX = ".fivetran_tmp_"
STALE_SECONDS = 24 * 3600   # private files of another host's process older than this are abandoned
COMMIT_FILE = re.compile(r"^\d{20}\.json$")

__all__ = ["Warehouse", "StorageOptions", "is_url", "url_scheme", "normalise_root", "path_component",
           "directory_name", "name_of_component", "same_ignoring_case", "owner_id"]


def normalise_root(path: str) -> str:
    return canonical(path)


RESERVED_SCHEMAS = (STAGING_DIR, TRASH_DIR)


def owner_id() -> str:
    """Names this process in the private areas: `<host>.<pid>` (a host name never has a `-`
    replaced here; `.` separates)."""
    host = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"
    return f"{host}.{os.getpid()}"


def _owner_of(name: str) -> Optional[tuple[str, int]]:
    for prefix in (PROBE_PREFIX, TMP_PREFIX):
        if name.startswith(prefix):
            name = name[len(prefix):]
    m = re.match(r"^([A-Za-z0-9_]+)\.(\d+)-", name)
    return (m.group(1), int(m.group(2))) if m else None


def abandoned(entry: Entry, now: Optional[float] = None) -> bool:
    """Was this private file or folder left by a process that is gone? Ours: no. Another process
    on this host: when its pid is dead. Another host (or an unknown name): when it is older than a day."""
    owner = _owner_of(entry.name)
    me_host, me_pid = owner_id().split(".")
    if owner is not None and owner[0] == me_host:
        return owner[1] != int(me_pid) and not pid_alive(owner[1])
    return (now or time.time()) - entry.mtime > STALE_SECONDS


_LITERAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
ESCAPE = "="
HASHED = "=="  # cannot occur in a spelled name: every "=" there is followed by two hex digits
MAX_COMPONENT = 255  # characters (= bytes: all ASCII), the usual filesystem limit per component
_PREFIX = 200


def path_component(name: str) -> str:
    """
    >>> path_component("Order Items"), path_component(".x"), path_component("a=b")
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
    options: StorageOptions = StorageOptions()

    def __post_init__(self):
        object.__setattr__(self, "root", canonical(self.root))

    @property
    def storage(self) -> Storage:
        return storage_for(self.root, self.options)

    def delta_rs_path(self, location: str) -> str:
        """A location of this warehouse as delta-rs spells it (its store's object_store form)."""
        return store_for(location).object_store_path(location)

    def delta_rs_options(self) -> dict[str, str]:
        """delta-rs `storage_options` of this warehouse's store."""
        return delta_rs_options(self.root, self.options)

    @property
    def is_local(self) -> bool:
        return not is_url(self.root)

    @property
    def can_list(self) -> bool:
        """Can the destination list and remove files here itself (local disks, S3)?"""
        return self.storage.can_list

    @property
    def can_rename(self) -> bool:
        """Atomic directory renames exist on a local disk only."""
        return self.is_local

    def join(self, *parts: str) -> str:
        if self.is_local:
            return os.path.join(self.root, *parts)
        return "/".join([self.root.rstrip("/"), *parts])

    def schema_location(self, schema: str) -> str:
        return self.join(directory_name("schema", schema))

    def table_location(self, schema: str, table: str) -> str:
        location = self.join(directory_name("schema", schema), directory_name("table", table))
        legacy = self.legacy_location(schema, table)
        if legacy is not None and not self.has_commits(location) and self.has_commits(legacy):
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

    # ---- tables as files ----------------------------------------------------------------------
    def commit_entries(self, location: str) -> list[Entry]:
        """The table's commit files (`_delta_log/<20 digits>.json`)."""
        return [e for e in self.storage.list(self.join_location(location, "_delta_log"))
                if not e.is_dir and COMMIT_FILE.match(e.name)]

    def has_commits(self, location: str) -> bool:
        """A Delta table exists once its log holds a commit."""
        return bool(self.commit_entries(location))

    def last_commit_time(self, location: str) -> float:
        """When the table was last written (0 when it has no commits)."""
        return max((e.mtime for e in self.commit_entries(location)), default=0.0)

    def join_location(self, location: str, *parts: str) -> str:
        if self.is_local:
            return os.path.join(location, *parts)
        return "/".join([location.rstrip("/"), *parts])

    def remove_failed_create(self, location: str) -> None:
        """A crash during CREATE can leave a table folder without commits or data: remove it (a
        folder with data files but no log is not ours to judge and stays)."""
        if self.has_commits(location):
            return
        entries = self.storage.list(location, recursive=True)
        if any(not e.is_dir and e.name.endswith(".parquet") for e in entries):
            return
        if entries or self.storage.exists(location):
            self.storage.delete_tree(location)

    def delete_tree(self, location: str) -> None:
        self.storage.delete_tree(location)

    def remove_uncommitted(self, location: str) -> None:
        """Files a failed write left where no commit made them a table."""
        if not self.has_commits(location):
            self.storage.delete_tree(location)

    def case_twin(self, schema: str, table: str) -> Optional[str]:
        """Another table of the schema whose name equals `table` ignoring case (its directory
        name), or None. Spark and most catalogs and readers resolve names case-insensitively,
        so such a pair is refused."""
        if not self.can_list:
            return None
        mine = path_component(table)
        for entry in sorted(self.storage.list(self.schema_location(schema)), key=lambda e: e.name):
            if entry.is_dir and entry.name != mine and same_ignoring_case(entry.name, table) \
                    and self.has_commits(entry.location):
                return entry.name
        return None

    def table_locations(self) -> Iterator[tuple[str, str, str]]:
        """(schema directory, table directory, location) of every Delta table."""
        if not self.can_list:
            return
        for schema in sorted(self.storage.list(self.root), key=lambda e: e.name):
            if not schema.is_dir or schema.name.startswith((".", "_fivetran_")):
                continue
            for table in sorted(self.storage.list(schema.location), key=lambda e: e.name):
                if table.is_dir and not table.name.startswith(".") and self.has_commits(table.location):
                    yield schema.name, table.name, table.location

    # ---- private areas ------------------------------------------------------------------------
    def new_staging_location(self) -> str:
        return self.join(STAGING_DIR, f"{owner_id()}-{uuid.uuid4().hex}")

    def new_probe_location(self) -> str:
        return self.join(f"{PROBE_PREFIX}{owner_id()}-{uuid.uuid4().hex}")

    def write_parquet_parts(self, location: str, parts) -> None:
        """Staged batch parts as Parquet files (a private folder on a local disk)."""
        self.storage.write_parquet_parts(location, parts)

    def remove_staging(self, location: str) -> None:
        self.storage.delete_tree(location)

    def trash(self) -> str:
        return self.join(TRASH_DIR)

    def new_trash_location(self) -> str:
        """Where a dropped local table waits for its files to be deleted."""
        return self.join(TRASH_DIR, f"{owner_id()}-{uuid.uuid4().hex}")

    def note_removal(self, location: str, only_without_commits: bool = False) -> str:
        """Before a multi-step removal or a write that a crash could leave half done: a note in
        the trash saying what to remove if this process dies first. Returns the note's location
        (`done_removal` deletes it)."""
        note = self.join(TRASH_DIR, f"{owner_id()}-{uuid.uuid4().hex}.json")
        body = json.dumps({"remove": location, "only_without_commits": only_without_commits}).encode()
        self.storage.write_bytes(note, body)
        return note

    def done_removal(self, note: str) -> None:
        self.storage.delete_file(note)

    def clean_leftovers(self, everything_dead: bool = False) -> int:
        """Remove what dead processes left: staged batches, probes, hidden half-written copies,
        dropped tables in the trash, and the removals their notes name. Returns how many.
        `everything_dead`: at start-up of the only process using a local warehouse (the old
        behaviour) -- not used by default: another process may share the warehouse."""
        if not self.can_list:
            return 0
        now = time.time()
        removed = 0
        for entry in self.storage.list(self.join(STAGING_DIR)):
            if everything_dead or abandoned(entry, now):
                self.storage.delete_tree(entry.location)
                removed += 1
        for entry in self.storage.list(self.root):
            if entry.name.startswith(PROBE_PREFIX) and (everything_dead or abandoned(entry, now)):
                self.storage.delete_tree(entry.location)
                removed += 1
        for entry in self.storage.list(self.join(TRASH_DIR)):
            if not (everything_dead or abandoned(entry, now)):
                continue
            if entry.is_dir:
                self.storage.delete_tree(entry.location)
            else:
                if entry.name.endswith(".json"):
                    self._finish_removal(entry.location)
                self.storage.delete_file(entry.location)
            removed += 1
        if self.is_local:
            for schema in self.storage.list(self.root):
                if schema.is_dir:
                    for entry in self.storage.list(schema.location):
                        if entry.name.startswith(TMP_PREFIX) and (everything_dead or abandoned(entry, now)):
                            self.storage.delete_tree(entry.location)
                            removed += 1
        return removed

    def _finish_removal(self, note: str) -> None:
        try:
            body = json.loads(self.storage.read_bytes(note))
            target = body["remove"]
        except (OSError, ValueError, KeyError, TypeError):
            return
        if not isinstance(target, str) or not canonical(target).startswith(self.root):
            return  # never outside this warehouse
        if body.get("only_without_commits") and self.has_commits(target):
            return
        self.storage.delete_tree(target)

    # ---- local directory operations ----------------------------------------------------------
    def hidden_sibling(self, location: str) -> str:
        """A hidden directory next to `location`, for a table written before it is moved in."""
        return os.path.join(os.path.dirname(location), f"{TMP_PREFIX}{owner_id()}-{uuid.uuid4().hex}")

    def rename_dir(self, src: str, dst: str) -> None:
        self.storage.rename_dir(src, dst)


def parquet_parts(data: pa.Table, rows: int) -> Iterator[pa.Table]:
    for offset in range(0, data.num_rows, rows):
        yield data.slice(offset, rows)
