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
