"""What the object-store tests plant and check around the removal of tables and probes (issue 40).

Engines on Hadoop file systems mark the folders they make: Hadoop ABFS on a flat-namespace Azure
account writes an empty blob of the folder's name (metadata `hdi_isfolder=true`), S3A and the GCS
connector an empty `name/` object. A removal must take those too: a marker left at `<table>` or
`<table>/_delta_log` makes the store (and Delta on Spark) see a folder, and pyarrow on Azure took a
marked table for a single file and removed nothing but that blob.

Each store's test module gives a `plant(relative_key, data, folder)` that writes an object under its
warehouse prefix as the engine's file system would (`folder`: the store's marker for a folder of that
name); the helpers below plant what a CREATE that died before its commit and a dead process's probe
leave, and `leftovers` reads the store's own listing (every object as stored, markers included).
"""
from __future__ import annotations

import uuid
from typing import Callable, Iterable

from delta_destination.private_areas import PROBE_PREFIX, owner_id

Plant = Callable[[str, bytes, bool], None]
DEAD_PID = 999999999


def plant_failed_create(plant: Plant, table: str) -> None:
    """What a CREATE of `table` (`schema/table`) that died before its commit leaves: the folders it
    made (marked) and a temporary commit file, no commit, no data file."""
    for folder in (table, f"{table}/_delta_log"):
        plant(folder, b"", True)
    plant(f"{table}/_delta_log/.00000000000000000000.json.{uuid.uuid4().hex}.tmp", b"{}", False)


def plant_dead_probe(plant: Plant) -> str:
    """A setup-test probe table of a process of this host that is gone (its pid cannot be alive):
    marked folders, two commits, a data file in a marked folder. Returns its folder's name."""
    name = f"{PROBE_PREFIX}{owner_id().split('.')[0]}.{DEAD_PID}-{uuid.uuid4().hex}"
    for folder in (name, f"{name}/_delta_log", f"{name}/_delta_log/_staged_commits", f"{name}/Bx"):
        plant(folder, b"", True)
    for version in (0, 1):
        plant(f"{name}/_delta_log/{version:020d}.json", b"{}", False)
    plant(f"{name}/Bx/part-00000-{uuid.uuid4().hex}-c000.snappy.parquet", b"PAR1", False)
    return name


def leftovers(keys: Iterable[str], prefix: str, kept: Iterable[str]) -> list[str]:
    """The objects under the warehouse `prefix` (`.../wh/`) that belong to none of the `kept` tables
    (`schema/table`): anything under a removed table, a probe, staging or the trash. The folders on
    the way to a kept table may have their markers (`s`, `s/`, and the warehouse's own `''`).

    >>> leftovers(["wh/", "wh/s", "wh/s/", "wh/s/t", "wh/s/t/_delta_log/0.json", "wh/s/gone/_delta_log"],
    ...           "wh/", ["s/t"])
    ['s/gone/_delta_log']
    """
    kept = [k.strip("/") for k in kept]
    folders = {""} | {"/".join(k.split("/")[:i]) for k in kept for i in range(1, k.count("/") + 2)}
    out = []
    for key in keys:
        rest = key[len(prefix):] if key.startswith(prefix) else key
        if rest.rstrip("/") in folders or any(rest.startswith(k + "/") for k in kept):
            continue
        out.append(rest)
    return sorted(out)
