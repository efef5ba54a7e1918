"""The setup form and the named tests a customer runs from the Fivetran dashboard."""
from __future__ import annotations

import os
import shutil
import uuid
from typing import Optional

from ._proto import common_pb2
from .config import SPARK_REMOTE_KEY, WAREHOUSE_KEY, Settings, is_url
from .errors import DestinationError
from .names import quote_string

TEST_ENGINE = "spark_engine"
TEST_WAREHOUSE = "warehouse_writable"
SETUP_TESTS = {
    TEST_ENGINE: "Spark engine answers",
    TEST_WAREHOUSE: "Warehouse is writable (creates, writes, reads and removes a probe Delta table)",
}


def configuration_form(settings: Settings) -> common_pb2.ConfigurationFormResponse:
    resp = common_pb2.ConfigurationFormResponse(schema_selection_supported=True, table_selection_supported=True)
    resp.fields.add(
        name=WAREHOUSE_KEY,
        label="Warehouse path",
        required=False,
        description=(
            "Directory (or storage URL seen by the Spark engine) under which tables are written as "
            "<warehouse>/<schema>/<table>. Leave empty to use the server's --warehouse "
            f"({settings.warehouse})."
        ),
        text_field=common_pb2.PlainText,
        placeholder="/data/lakehouse/fivetran",
    )
    resp.fields.add(
        name=SPARK_REMOTE_KEY,
        label="Spark Connect URL",
        required=False,
        description=(
            "Spark Connect endpoint of an Apache Spark cluster with Delta Lake, for large volumes. "
            "Leave empty to use the embedded engine (Sail) inside the destination."
        ),
        text_field=common_pb2.PlainText,
        placeholder="sc://spark-connect.internal:15002",
    )
    for name, label in SETUP_TESTS.items():
        resp.tests.add(name=name, label=label)
    return resp


def run_setup_test(name: str, settings: Settings, tables) -> Optional[str]:
    """Returns None on success, or a message the customer can act on."""
    if name == TEST_ENGINE:
        if tables.sessions.healthy(settings.spark_remote):
            return None
        return "The Spark engine did not answer. Check the Spark Connect URL and that the server is running."
    if name == TEST_WAREHOUSE:
        return _probe_warehouse(settings, tables)
    return f"unknown test {name}"


def _probe_warehouse(settings: Settings, tables) -> Optional[str]:
    wh = settings.warehouse
    if not is_url(wh):
        try:
            os.makedirs(wh, exist_ok=True)
        except OSError as exc:
            return f"Cannot create the warehouse directory {wh}: {exc.strerror}"
        if not os.access(wh, os.W_OK | os.X_OK):
            return f"The warehouse directory {wh} is not writable by the destination."
    probe = f"{wh.rstrip('/')}/_fivetran_probe_{uuid.uuid4().hex}" if is_url(wh) else os.path.join(wh, f"_fivetran_probe_{uuid.uuid4().hex}")
    ident = f"fivetran_probe_{uuid.uuid4().hex}"
    try:
        spark = tables.spark(settings)
        spark.sql(f"CREATE TABLE {ident} (id INT) USING delta LOCATION {quote_string(probe)}").collect()
        spark.sql(f"INSERT INTO {ident} VALUES (1)").collect()
        rows = spark.read.format("delta").load(probe).collect()
        if [r[0] for r in rows] != [1]:
            return "The probe Delta table did not read back what was written."
        return None
    except DestinationError as exc:
        return exc.message
    except Exception as exc:  # noqa: BLE001 - reported to the customer as a test failure
        return f"Writing a probe Delta table under {wh} failed ({type(exc).__name__})."
    finally:
        try:
            tables.spark(settings).sql(f"DROP TABLE IF EXISTS {ident}").collect()
        except Exception:
            pass
        if not is_url(probe):
            shutil.rmtree(probe, ignore_errors=True)
