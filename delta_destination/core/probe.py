"""Proving the warehouse and the engine work: a probe Delta table written, read, removed.

Every door's connection check uses it (Fivetran's setup test, Airbyte's `check`). The probe
lives in the warehouse's private area for this process (`_fivetran_probe_<owner>-<id>`) and
is removed after success and failure alike; one left by a crash is removed at the next start.
"""
from __future__ import annotations

import os
from typing import Optional

from ..errors import DestinationError
from ..settings import Settings
from .model import Column, DataType
from .sql import column_defs, probe_insert_sql, select_sql


def probe_warehouse(registry, settings: Settings) -> Optional[str]:
    """None when a probe table could be written and read back; else a reason the user can act on."""
    wh = registry.warehouse(settings)
    try:
        registry.router.check_warehouse(settings, wh.root)
    except DestinationError as exc:
        return exc.message
    if wh.is_local:
        try:
            os.makedirs(wh.root, exist_ok=True)
        except OSError as exc:
            return f"Cannot create the warehouse directory {wh.root}: {exc.strerror}"
        if not os.access(wh.root, os.W_OK | os.X_OK):
            return f"The warehouse directory {wh.root} is not writable by the destination."
    probe = wh.private_areas.new_probe_location()
    try:
        with registry.session(settings) as eng:
            try:
                return write_and_read_probe(eng, probe)
            finally:
                try:
                    eng.schema_changed(probe)
                except Exception:  # noqa: BLE001 - best effort
                    pass
    except DestinationError as exc:
        return exc.message
    except Exception as exc:  # noqa: BLE001 - reported to the user as a failed check
        return f"Writing a probe Delta table under {wh.root} failed ({type(exc).__name__})."
    finally:
        try:
            wh.storage.delete_tree(probe)
        except Exception:  # noqa: BLE001 - a leftover probe is removed at the next start
            pass


def write_and_read_probe(eng, probe: str) -> Optional[str]:
    """Create, write and read the probe table at `probe`: None when it reads back what was written."""
    eng.create_table(probe, column_defs([Column("id", DataType.INT)]), eng.creation_properties())
    name = eng.table_name(probe)
    eng.execute("write the probe table", probe_insert_sql(name))
    rows = eng.rows("read the probe table", select_sql(name, ["*"]))
    if [r[0] for r in rows] != [1]:
        return "The probe Delta table did not read back what was written."
    return None
