"""The destination's private areas in a warehouse: staged batches, setup probes, the trash and
half-written copies, and the removal of what a dead process left there.

They live at the warehouse root and are named after the process that made them (`owner_id`:
host, pid), so that several destination processes can share one warehouse:
`_fivetran_staging/<owner>-<uuid>/` (big batches staged on their way to a statement),
`_fivetran_probe_<owner>-<uuid>` (setup probes), `_fivetran_trash/` (local: dropped tables
before their files are deleted; everywhere: `<owner>-<uuid>.json` notes of removals to finish
after a crash). Half-written table copies on a local disk are hidden next to their target as
`.fivetran_tmp_<owner>-<uuid>`. What a dead process left is removed at the next start and
before the next staged write (`clean_leftovers`); names that would land on these areas are
refused as schema names (`RESERVED_SCHEMAS`, warehouse.directory_name).

Whether a location already holds a table is the Delta log's to say (core/delta_log.py), so the
one step that needs it, finishing a removal noted `only_without_commits`, is given that test by
its caller (core/table_dirs.py `clean_leftovers`).
"""
from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Optional, Protocol

from .processes import pid_alive
from .storage import Entry, Storage, canonical

STAGING_DIR = "_fivetran_staging"
TRASH_DIR = "_fivetran_trash"
PROBE_PREFIX = "_fivetran_probe_"
TMP_PREFIX = ".fivetran_tmp_"
STALE_SECONDS = 24 * 3600   # private files of another host's process older than this are abandoned
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


def _token() -> str:
    return f"{owner_id()}-{uuid.uuid4().hex}"


class WarehouseLike(Protocol):
    """What the private areas need of their warehouse (warehouse.Warehouse), which holds them."""

    root: str

    @property
    def storage(self) -> Storage: ...

    @property
    def can_list(self) -> bool: ...

    @property
    def is_local(self) -> bool: ...

    def join(self, *parts: str) -> str: ...


@dataclass(frozen=True)
class PrivateAreas:
    """The private areas of one warehouse (`Warehouse.private_areas`)."""

    warehouse: WarehouseLike

    def new_staging_location(self) -> str:
        return self.warehouse.join(STAGING_DIR, _token())

    def new_probe_location(self) -> str:
        return self.warehouse.join(f"{PROBE_PREFIX}{_token()}")

    def trash(self) -> str:
        return self.warehouse.join(TRASH_DIR)

    def new_trash_location(self) -> str:
        """Where a dropped local table waits for its files to be deleted."""
        return self.warehouse.join(TRASH_DIR, _token())

    def hidden_sibling(self, location: str) -> str:
        """A hidden directory next to `location`, for a table written before it is moved in (local disks)."""
        return os.path.join(os.path.dirname(location), f"{TMP_PREFIX}{_token()}")

    def note_removal(self, location: str, only_without_commits: bool = False) -> str:
        """Before a multi-step removal or a write that a crash could leave half done: a note in
        the trash saying what to remove if this process dies first. Returns the note's location
        (`done_removal` deletes it)."""
        note = self.warehouse.join(TRASH_DIR, f"{_token()}.json")
        body = json.dumps({"remove": location, "only_without_commits": only_without_commits}).encode()
        self.warehouse.storage.write_bytes(note, body)
        return note

    def done_removal(self, note: str) -> None:
        self.warehouse.storage.delete_file(note)

    def clean_leftovers(self, has_table: Callable[[str], bool], everything_dead: bool = False) -> int:
        """Remove what dead processes left: staged batches, probes, hidden half-written copies,
        dropped tables in the trash, and the removals their notes name (`has_table(location)`:
        does a Delta table live there, for notes that remove only what never became one).
        Returns how many. `everything_dead`: at start-up of the only process using a local
        warehouse (the old behaviour) -- not used by default: another process may share the warehouse."""
        wh = self.warehouse
        if not wh.can_list:
            return 0
        storage = wh.storage
        now = time.time()
        removed = 0
        for entry in storage.list(wh.join(STAGING_DIR)):
            if everything_dead or abandoned(entry, now):
                storage.delete_tree(entry.location)
                removed += 1
        for entry in storage.list(wh.root):
            if entry.name.startswith(PROBE_PREFIX) and (everything_dead or abandoned(entry, now)):
                storage.delete_tree(entry.location)
                removed += 1
        for entry in storage.list(wh.join(TRASH_DIR)):
            if not (everything_dead or abandoned(entry, now)):
                continue
            if entry.is_dir:
                storage.delete_tree(entry.location)
            else:
                if entry.name.endswith(".json"):
                    self._finish_removal(entry.location, has_table)
                storage.delete_file(entry.location)
            removed += 1
        if wh.is_local:
            for schema in storage.list(wh.root):
                if schema.is_dir:
                    for entry in storage.list(schema.location):
                        if entry.name.startswith(TMP_PREFIX) and (everything_dead or abandoned(entry, now)):
                            storage.delete_tree(entry.location)
                            removed += 1
        return removed

    def _finish_removal(self, note: str, has_table: Callable[[str], bool]) -> None:
        storage = self.warehouse.storage
        try:
            body = json.loads(storage.read_bytes(note))
            target = body["remove"]
        except (OSError, ValueError, KeyError, TypeError):
            return
        if not isinstance(target, str) or not canonical(target).startswith(self.warehouse.root):
            return  # never outside this warehouse
        if body.get("only_without_commits") and has_table(target):
            return
        storage.delete_tree(target)
