"""Reading a Delta table's log without the engine: its version, recent properties, a commit's
metrics, and (through delta-rs, the independent reader) its live files.

Used where the destination must know something about a table that the engine would take
seconds to answer (key ranges, the memory guard, the version a commit wrote, a copy's
marker). Works on every warehouse the destination can list (local disks, S3); callers fall
back to the engine or to "unknown" elsewhere.
"""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..storage import Entry
from ..warehouse import Warehouse

LOG_DIR = "_delta_log"
COMMIT_FILE = re.compile(r"^\d{20}\.json$")


def commit_entries(warehouse: Warehouse, location: str) -> list[Entry]:
    """The table's commit files (`_delta_log/<20 digits>.json`), listed through the warehouse's
    store: the one place that says which of the log's files are commits."""
    return [e for e in warehouse.storage.list(warehouse.join_location(location, LOG_DIR))
            if not e.is_dir and COMMIT_FILE.match(e.name)]


def has_commits(warehouse: Warehouse, location: str) -> bool:
    """A Delta table exists once its log holds a commit."""
    return bool(commit_entries(warehouse, location))


def last_commit_time(warehouse: Warehouse, location: str) -> float:
    """When the table was last written (0 when it has no commits)."""
    return max((e.mtime for e in commit_entries(warehouse, location)), default=0.0)


def delta_version(warehouse: Warehouse, location: str) -> int:
    """The newest commit version in the log, -1 when there is none."""
    return max((int(e.name[:20]) for e in commit_entries(warehouse, location)), default=-1)


def _actions(warehouse: Warehouse, location: str, version: int) -> list[dict]:
    path = warehouse.join_location(location, "_delta_log", f"{version:020d}.json")
    try:
        text = warehouse.storage.read_bytes(path).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in text.splitlines():
        try:
            action = json.loads(line)
        except ValueError:
            continue
        if isinstance(action, dict):
            out.append(action)
    return out


def latest_property(warehouse: Warehouse, location: str, key: str) -> Optional[str]:
    """The value of a table property in the newest metaData action of the JSON commits."""
    versions = sorted((int(e.name[:20]) for e in commit_entries(warehouse, location)), reverse=True)
    for version in versions:
        meta = metadata_of(warehouse, location, version)
        if meta is not None:
            return (meta.get("configuration") or {}).get(key)
    return None


def metadata_of(warehouse: Warehouse, location: str, version: int) -> Optional[dict]:
    """The last metaData action of one commit file, or None."""
    metas = [a["metaData"] for a in _actions(warehouse, location, version) if isinstance(a.get("metaData"), dict)]
    return metas[-1] if metas else None


@dataclass
class PropertyWatch:
    """The current value of one table property, read from the table's Delta log incrementally:
    log files never change once written, so each look lists the log and reads only the commits
    newer than the last one read. Where the log cannot say (storage the destination cannot list,
    or no JSON commit holds a metaData action any more: cleaned up behind a checkpoint), `ask`
    gives every value the property has had, through the engine, and the newest counts -- so it
    serves properties whose values only grow. Never takes the table's lock: a commit guard asks
    it while the writer holds that lock."""

    warehouse: Warehouse
    location: str
    key: str
    ask: Callable[[], list[str]]
    version: int = -1                  # newest commit read so far
    value: Optional[str] = None
    known: bool = False                # a metaData action was read (or the engine told us)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def current(self) -> Optional[str]:
        if not self.warehouse.can_list:
            return max(self.ask(), default=None)
        with self._lock:
            new = sorted(v for v in (int(e.name[:20]) for e in commit_entries(self.warehouse, self.location))
                         if v > self.version)
            if new:
                # Once known, newer commits oldest first (the last metaData wins); the first read goes
                # newest first, up to the first metaData.
                for v in (new if self.known else reversed(new)):
                    meta = metadata_of(self.warehouse, self.location, v)
                    if meta is not None:
                        self.value = (meta.get("configuration") or {}).get(self.key)
                        if not self.known:
                            self.known = True
                            break
                self.version = new[-1]
            if not self.known:
                self.value, self.known = max(self.ask(), default=None), True
            return self.value


def commits_keep_metadata(warehouse: Warehouse, location: str, after: int, upto: int) -> bool:
    """Do the commits after..upto (JSON, all readable) hold no metaData action, i.e. leave the
    table's schema and properties as they were at `after`? False when one cannot be read."""
    for version in range(after + 1, upto + 1):
        path = warehouse.join_location(location, "_delta_log", f"{version:020d}.json")
        try:
            text = warehouse.storage.read_bytes(path).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return False
        if any('"metaData"' in line and isinstance(json.loads(line).get("metaData"), dict)
               for line in text.splitlines() if line.strip()):
            return False
    return True


def commit_info(warehouse: Warehouse, location: str, version: int) -> Optional[dict]:
    """The commitInfo action of one commit (None when absent or unreadable)."""
    for action in _actions(warehouse, location, version):
        info = action.get("commitInfo")
        if isinstance(info, dict):
            return info
    return None


def table_configuration(warehouse: Warehouse, location: str) -> Optional[dict[str, str]]:
    """The table's current properties (its log, checkpoints included, through delta-rs); None
    where the destination cannot read the log itself or the table cannot be read."""
    if not warehouse.can_list:
        return None
    try:
        return dict(open_table(warehouse, location).metadata().configuration or {})
    except Exception:  # noqa: BLE001 - delta-rs raises several types; unknown is the answer
        return None


# How delta-rs commits safely on S3: put-if-absent (`If-None-Match`), as Sail's and Spark's S3A commits
# do, asked for explicitly rather than left to delta-rs's defaults (which have changed across versions,
# and rename unsafely when AWS_S3_ALLOW_UNSAFE_RENAME is set).
S3_SAFE_COMMITS = {"aws_conditional_put": "etag"}


def open_table(warehouse: Warehouse, location: str, for_commits: bool = False):
    """The table through delta-rs (raises when it cannot be read); `for_commits`: opened to write
    a commit (core/compaction.py), with the store's safe-commit options."""
    from deltalake import DeltaTable

    if warehouse.is_local:
        return DeltaTable(location)
    options = warehouse.delta_rs_options()
    if for_commits and location.startswith(("s3://", "s3a://")):
        options = {**options, **S3_SAFE_COMMITS}
    return DeltaTable(warehouse.delta_rs_path(location), storage_options=options)


def row_counts(info: Optional[dict]) -> Optional[tuple[int, int, int]]:
    """(inserted, updated, deleted) rows as the engine counted them in a commit's
    operationMetrics (Sail and delta-spark use the same names), None when it did not.
    A MERGE knows which source rows matched; the request alone does not (an upsert may
    insert or replace).
    >>> row_counts({"operation": "MERGE", "operationMetrics": {"numTargetRowsInserted": 2,
    ...     "numTargetRowsUpdated": 1, "numTargetRowsDeleted": 0}})
    (2, 1, 0)
    >>> row_counts({"operation": "WRITE", "operationMetrics": {"numOutputRows": "5"}})
    (5, 0, 0)
    >>> row_counts({"operation": "SET TBLPROPERTIES"}) is None
    True
    """
    metrics = (info or {}).get("operationMetrics")
    if not isinstance(metrics, dict):
        return None

    def n(key: str) -> int:
        return int(metrics.get(key) or 0)  # delta-spark writes the numbers as strings

    try:
        if "numTargetRowsInserted" in metrics:  # MERGE
            return n("numTargetRowsInserted"), n("numTargetRowsUpdated"), n("numTargetRowsDeleted")
        if info.get("operation") == "WRITE" and "numOutputRows" in metrics:  # INSERT INTO / append
            return n("numOutputRows"), 0, 0
        if "numUpdatedRows" in metrics or "numDeletedRows" in metrics:  # UPDATE / DELETE
            return 0, n("numUpdatedRows"), n("numDeletedRows")
    except (TypeError, ValueError):
        return None
    return None
