"""Proving the warehouse and the engine work: a probe Delta table written, read, removed.

Every door's connection check uses it (Fivetran's setup test, Airbyte's `check`)."""
from __future__ import annotations

import os
import shutil
import uuid
from typing import Optional

from ..engines.dialect import dialect_for
from ..engines.errors import run_engine
from ..settings import Settings
from ..warehouse import Warehouse
from .errors import DestinationError
from .model import Column, DataType
from .sql import column_defs


def probe_warehouse(catalog, settings: Settings) -> Optional[str]:
    """None when a probe table could be written and read back; else a reason the user can act on."""
    wh = Warehouse(settings.warehouse)
    try:
        dialect_for(settings.engine).check_warehouse_root(wh.root)
    except DestinationError as exc:
        return exc.message
    if wh.is_local:
        try:
            os.makedirs(wh.root, exist_ok=True)
        except OSError as exc:
            return f"Cannot create the warehouse directory {wh.root}: {exc.strerror}"
        if not os.access(wh.root, os.W_OK | os.X_OK):
            return f"The warehouse directory {wh.root} is not writable by the destination."
    probe = wh.join(f"_fivetran_probe_{uuid.uuid4().hex}")
    eng = None
    try:
        eng = catalog.session(settings)
        spark, dialect = eng.spark, eng.dialect
        dialect.create_table(spark, probe, column_defs([Column("id", DataType.INT)]), dialect.creation_properties())
        name = dialect.table_name(spark, probe)
        run_engine("write the probe table", lambda: spark.sql(f"INSERT INTO {name} VALUES (1)").collect())
        rows = run_engine("read the probe table", lambda: spark.read.format("delta").load(probe).collect())
        if [r[0] for r in rows] != [1]:
            return "The probe Delta table did not read back what was written."
        return None
    except DestinationError as exc:
        return exc.message
    except Exception as exc:  # noqa: BLE001 - reported to the user as a failed check
        return f"Writing a probe Delta table under {wh.root} failed ({type(exc).__name__})."
    finally:
        if eng is not None:
            try:
                eng.dialect.schema_changed(eng.spark, probe)
            except Exception:  # noqa: BLE001 - best effort
                pass
        if wh.is_local:
            shutil.rmtree(probe, ignore_errors=True)
