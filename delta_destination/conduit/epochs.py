"""Writer epochs: a later instance of a Conduit connector owns a table from its claim on, and
an earlier instance's late commit is refused (docs/conduit.md, "Writer epochs").

The epoch is a Delta table property per Conduit connector, `conduit.epoch.<connector id>`, whose
value `<epoch, 12 digits>-<instance>` only grows. An instance claims a table (one commit of its
own) before its first write to it; the guard checks, right before each commit, that the
table's current value is still its own token.
"""
from __future__ import annotations

import json
import os
import secrets
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

from .. import logs
from ..errors import DestinationError
from ..warehouse import Warehouse
from .errors import Superseded

log = logs.get(__name__)

PREFIX = "conduit.epoch."
CLAIM_ATTEMPTS = 5


def epoch_key(connector_id: str) -> str:
    """The property of one Conduit connector (`pipeline:connector`); other connectors writing
    the same table keep epochs of their own and never refuse each other."""
    return PREFIX + (connector_id or "unnamed")


def new_instance_tag() -> str:
    return f"{os.getpid()}.{secrets.token_hex(4)}"


def token(epoch: int, instance: str) -> str:
    """The claim token: zero-padded so that tokens compare as text in epoch order.

    >>> token(7, "123.ab")
    '000000000007-123.ab'
    """
    return f"{epoch:012d}-{instance}"


def epoch_of(value: Optional[str]) -> int:
    """The epoch of a token; no token or a foreign value counts as epoch 0 (never claimed).

    >>> epoch_of('000000000007-123.ab'), epoch_of(None), epoch_of('junk')
    (7, 0, 0)
    """
    head = (value or "").partition("-")[0]
    return int(head) if head.isdigit() else 0


def newest(values: list[str]) -> Optional[str]:
    """The current value when values only grow (zero-padded epochs compare as text)."""
    return max(values) if values else None


# ---- reading a table's log ----------------------------------------------------------------------
@dataclass
class LogCursor:
    """The property's value in a table's newest metaData action, read from its Delta log
    incrementally: log files never change once written, so each check lists the log and reads
    only the commits newer than the last one it read. For warehouses the destination can list
    (local disks, S3)."""

    warehouse: Warehouse
    location: str
    key: str
    version: int = -1                  # newest commit read so far
    value: Optional[str] = None
    known: bool = False                # a metaData action was read (or the engine told us)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def current(self) -> tuple[Optional[str], bool]:
        """(value, known). Not known: no JSON commit holds a metaData action (the log was cleaned
        up behind a checkpoint); the caller asks the engine and `seed`s the answer."""
        with self._lock:
            new = sorted(v for v in (int(e.name[:20]) for e in self.warehouse.commit_entries(self.location))
                         if v > self.version)
            if not new:
                return self.value, self.known
            if self.known:                  # newer commits, oldest first: the last metaData wins
                for v in new:
                    meta = self._metadata_of(v)
                    if meta is not None:
                        self.value = (meta.get("configuration") or {}).get(self.key)
            else:                           # first read: newest first, up to the first metaData
                for v in reversed(new):
                    meta = self._metadata_of(v)
                    if meta is not None:
                        self.value = (meta.get("configuration") or {}).get(self.key)
                        self.known = True
                        break
            self.version = new[-1]
            return self.value, self.known

    def seed(self, value: Optional[str]) -> None:
        with self._lock:
            self.value, self.known = value, True

    def _metadata_of(self, version: int) -> Optional[dict]:
        """The last metaData action of one commit file, or None."""
        path = self.warehouse.join_location(self.location, "_delta_log", f"{version:020d}.json")
        meta = None
        for line in self.warehouse.storage.read_bytes(path).decode("utf-8").splitlines():
            if '"metaData"' in line:
                action = json.loads(line)
                if isinstance(action, dict) and isinstance(action.get("metaData"), dict):
                    meta = action["metaData"]
        return meta


# ---- claims and checks ------------------------------------------------------------------------
class Epochs:
    """This instance's claims. `locate(table)` is (warehouse, location); `read_values(table)`
    reads every value the property has had through the engine (for storage the destination
    cannot list, and where the log holds no metaData action any more); `set_value(table, value)`
    commits a new value (a claim). `read_values` must not take the table's lock: the guard
    runs while the writer holds it."""

    def __init__(self, connector_id: str, locate: Callable[[str], tuple[Warehouse, str]],
                 read_values: Callable[[str], list[str]], set_value: Callable[[str, str], None],
                 instance: Optional[str] = None):
        self.key = epoch_key(connector_id)
        self.instance = instance or new_instance_tag()
        self.locate = locate
        self.read_values = read_values
        self.set_value = set_value
        self.mine: dict[str, str] = {}           # table -> our token
        self._cursors: dict[str, LogCursor] = {}
        self._lock = threading.Lock()

    def owner(self, table: str) -> Optional[str]:
        warehouse, location = self.locate(table)
        if warehouse.can_list:
            with self._lock:
                cursor = self._cursors.get(table)
                if cursor is None or cursor.location != location:
                    cursor = self._cursors[table] = LogCursor(warehouse, location, self.key)
            value, known = cursor.current()
            if not known:
                value = newest(self.read_values(table))
                cursor.seed(value)
            return value
        return newest(self.read_values(table))

    def claimed(self, table: str) -> bool:
        return table in self.mine

    def claim(self, table: str, display: str) -> str:
        """Make this instance the table's writer (a commit of its own). Raises Superseded when
        other claims keep landing in between (two live instances fighting over a table)."""
        for _ in range(CLAIM_ATTEMPTS):
            current = self.owner(table)
            mine = token(epoch_of(current) + 1, self.instance)
            self.set_value(table, mine)
            now = self.owner(table)
            if now == mine:
                self.mine[table] = mine
                log.info(f"{display}: writer epoch {epoch_of(mine)} claimed (previous {epoch_of(current)})")
                return mine
            log.warning(f"{display}: another instance claimed the table at the same time; claiming again")
        raise Superseded(f"another instance of this connector keeps claiming table {display} at the same time")

    def check(self, table: str, display: str) -> None:
        """The guard's half about ordering: refuse unless our claim is still the table's newest."""
        mine = self.mine.get(table)
        if mine is None:
            raise DestinationError(f"table {display} was about to be written before this instance claimed it")
        now = self.owner(table)
        if now != mine:
            raise Superseded(f"a newer instance of this connector took the table over (writer epoch "
                             f"{epoch_of(now)}, this instance has {epoch_of(mine)})")
