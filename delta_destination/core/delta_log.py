"""Reading a Delta table's log without the engine: its version, recent properties, a commit's
metrics, and (through delta-rs, the independent reader) its live files.

Used where the destination must know something about a table that the engine would take
seconds to answer (key ranges, the memory guard, the version a commit wrote, a copy's
marker). Works on every warehouse the destination can list (local disks, object stores); callers fall
back to the engine or to "unknown" elsewhere.
"""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

import pyarrow as pa

from ..storage import Entry, store_for
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


def commit_actions(warehouse: Warehouse, location: str, version: int) -> Optional[list[dict]]:
    """The actions of one commit, in order; None when its file cannot be read (cleaned up behind a
    checkpoint, or not there): callers that must see every commit (core/iceberg/mirror.py) then
    fall back to the table's snapshot."""
    path = warehouse.join_location(location, LOG_DIR, f"{version:020d}.json")
    try:
        text = warehouse.storage.read_bytes(path).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    try:
        return [a for a in (json.loads(line) for line in text.splitlines() if line.strip()) if isinstance(a, dict)]
    except ValueError:
        return None


def latest_property(warehouse: Warehouse, location: str, key: str) -> Optional[str]:
    """The value of a table property in the newest metaData action of the JSON commits."""
    configuration = newest_configuration(warehouse, location, checkpoints=False)
    return configuration.get(key) if configuration is not None else None


def newest_configuration(warehouse: Warehouse, location: str, checkpoints: bool = True) -> Optional[dict[str, str]]:
    """The table's properties as its newest metaData action says, read without delta-rs (for tables
    delta-rs refuses: a protocol feature it lacks): the newest JSON commit that holds one, else
    (`checkpoints`) the newest checkpoint's. Log cleanup removes the oldest commits first, so a
    JSON commit that is kept is newer than every one removed. None: no metaData action readable."""
    versions = sorted((int(e.name[:20]) for e in commit_entries(warehouse, location)), reverse=True)
    for version in versions:
        meta = metadata_of(warehouse, location, version)
        if meta is not None:
            return dict(meta.get("configuration") or {})
    return checkpoint_configuration(warehouse, location) if checkpoints else None


# Classic (`n.checkpoint.parquet`), multi-part (`n.checkpoint.i.k.parquet`) and V2 (`n.checkpoint.<uuid>.parquet`
# or `.json`, whose top-level file holds the metaData action) checkpoints.
CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint(\.[^/]+)?\.(parquet|json)$")


def checkpoint_configuration(warehouse: Warehouse, location: str) -> Optional[dict[str, str]]:
    """The properties in the newest checkpoint's metaData action (one file, the parts of a
    multi-part one, or a V2 checkpoint's top-level file); None when there is none or it cannot be read."""
    import pyarrow.parquet as pq

    found: dict[int, list[str]] = {}
    for e in warehouse.storage.list(warehouse.join_location(location, LOG_DIR)):
        m = CHECKPOINT_FILE.match(e.name)
        if m and not e.is_dir:
            found.setdefault(int(m.group(1)), []).append(e.location)
    if not found:
        return None
    for path in sorted(found[max(found)]):
        try:
            data = warehouse.storage.read_bytes(path)
            if path.endswith(".json"):
                metas = [json.loads(line).get("metaData") for line in data.decode("utf-8").splitlines() if line.strip()]
            else:
                metas = pq.read_table(pa.BufferReader(data), columns=["metaData"]).column("metaData").to_pylist()
        except (OSError, KeyError, ValueError, AttributeError, pa.ArrowException):
            return None
        for meta in metas:
            if isinstance(meta, dict):
                return dict(meta.get("configuration") or [])
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


@dataclass(frozen=True)
class LogField:
    """A column as the Delta log's schema names it: its primitive type (`long`, `string`, ...;
    None for nested types) and the name its statistics and files use (column mapping's physical
    name, or the column's own)."""

    type: Optional[str]
    physical: str
    # Delta's record of type widenings (`delta.typeChanges` in the field's metadata): the column's
    # older files hold a narrower type. Sail 0.7.2 refuses a table where this record no longer
    # ends at the column's type (after its own rewrite to another type): core/tables.py.
    widened: bool = False


@dataclass(frozen=True)
class TableSnapshot:
    """One read of a table's Delta log (checkpoints included, through delta-rs): what a write is
    planned from (core/write_plan.py). Read once per operation (registry.OpenTable.snapshot);
    its pieces are read by pure functions: the live files' size (memory.table_size), their key
    statistics (target_files.file_stats, key_ranges.keys_cannot_match), the properties (whether
    deletion vectors are on)."""

    version: int
    configuration: dict[str, str]
    fields: dict[str, LogField]
    adds: pa.Table            # the live files, one row each: delta-rs's flattened add actions
    # The table features of its protocol, reader and writer (e.g. "typeWidening", "columnMapping"):
    # which engine can serve which request on it (engines/choice.py).
    features: frozenset = frozenset()


PHYSICAL_NAME = "delta.columnMapping.physicalName"
TYPE_CHANGES = "delta.typeChanges"


def read_snapshot(warehouse: Warehouse, location: str) -> Optional[TableSnapshot]:
    """The table's snapshot; None where the destination cannot read the log itself (a store it
    cannot list) or the table cannot be read (no table yet, or delta-rs refuses it): callers then
    plan as if nothing were known (the engine reads every file, no guard)."""
    if not warehouse.can_list:
        return None
    try:
        dt = open_table(warehouse, location)
        fields = {f.name: LogField(getattr(f.type, "type", None), (f.metadata or {}).get(PHYSICAL_NAME, f.name),
                                   bool((f.metadata or {}).get(TYPE_CHANGES)))
                  for f in dt.schema().fields}
        adds = pa.table(dt.get_add_actions(flatten=True))
        protocol = dt.protocol()
        features = frozenset((protocol.reader_features or []) + (protocol.writer_features or []))
        return TableSnapshot(dt.version(), dict(dt.metadata().configuration or {}), fields, adds, features)
    except Exception:  # noqa: BLE001 - delta-rs raises several types; unknown is the answer
        return None


def open_table(warehouse: Warehouse, location: str, for_commits: bool = False):
    """The table through delta-rs (raises when it cannot be read); `for_commits`: opened to write
    a commit (core/compaction.py), with the store's safe-commit options (Store.commit_options)."""
    from deltalake import DeltaTable

    if warehouse.is_local:
        return DeltaTable(location)
    options = warehouse.delta_rs_options()
    if for_commits:
        options = {**options, **store_for(location).commit_options()}
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
