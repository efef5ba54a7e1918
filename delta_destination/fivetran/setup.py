"""The setup form and the named tests a customer runs from the Fivetran dashboard."""
from __future__ import annotations

from typing import Optional

from ..core.probe import probe_warehouse
from ..settings import SPARK_REMOTE_KEY, WAREHOUSE_KEY, Settings
from ._proto import common_pb2

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


def run_setup_test(name: str, settings: Settings, core) -> Optional[str]:
    """Returns None on success, or a message the customer can act on."""
    if name == TEST_ENGINE:
        if core.engines.answers(settings):
            return None
        return "The Spark engine did not answer. Check the Spark Connect URL and that the server is running."
    if name == TEST_WAREHOUSE:
        return probe_warehouse(core.catalog, settings)
    return f"unknown test {name}"
