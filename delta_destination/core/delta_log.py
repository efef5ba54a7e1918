"""Reading a LOCAL Delta table's log directly (no engine): its version and recent properties.

Used where the destination works on table directories itself (copies, renames) and to
report the version a commit wrote. Object-store tables are read through the engine.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Optional


def delta_version(location: str) -> int:
    """The newest commit version in the log, -1 when there is none."""
    log_dir = os.path.join(location, "_delta_log")
    best = -1
    for n in os.listdir(log_dir) if os.path.isdir(log_dir) else ():
        if len(n) == 25 and n.endswith(".json") and n[:20].isdigit():
            best = max(best, int(n[:20]))
    return best


def latest_property(location: str, key: str) -> Optional[str]:
    """The value of a table property in the newest metaData action of the JSON commits."""
    files = sorted(glob.glob(os.path.join(glob.escape(location), "_delta_log", "[0-9]" * 20 + ".json")))
    for path in reversed(files):
        metas = []
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if '"metaData"' in line:
                        action = json.loads(line)
                        if isinstance(action, dict) and isinstance(action.get("metaData"), dict):
                            metas.append(action["metaData"])
        except (OSError, ValueError):
            continue
        if metas:
            return (metas[-1].get("configuration") or {}).get(key)
    return None


def commit_info(location: str, version: int) -> Optional[dict]:
    """The commitInfo action of one commit of a local table (None when absent or unreadable)."""
    path = os.path.join(location, "_delta_log", f"{version:020d}.json")
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if '"commitInfo"' in line:
                    action = json.loads(line)
                    info = action.get("commitInfo") if isinstance(action, dict) else None
                    return info if isinstance(info, dict) else None
    except (OSError, ValueError):
        return None
    return None


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
