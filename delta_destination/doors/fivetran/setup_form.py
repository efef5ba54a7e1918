"""The setup form and the named tests a customer runs from the Fivetran dashboard.

The form is the settings schema's connection fields (settings.FIELDS), in its order, with
the same keys as every other surface; secrets are password fields."""
from __future__ import annotations

from typing import Optional

from ... import logs
from ...settings import BOOL, CHOICE, CONNECTION_FIELDS, Field, Settings
from ._proto import common_pb2

log = logs.get(__name__)

TEST_ENGINE = "spark_engine"
TEST_WAREHOUSE = "warehouse_writable"
SETUP_TESTS = {
    TEST_ENGINE: "Spark engine answers",
    TEST_WAREHOUSE: "Warehouse is writable (creates, writes, reads and removes a probe Delta table)",
}


def form_field(f: Field, settings: Settings) -> dict:
    """One FormField's arguments. Every field is optional: empty means the server's own setting."""
    description = f.help
    if f.key == "warehouse":
        description += f" Empty: the server's --warehouse ({settings.warehouse})."
    args = dict(name=f.key, label=f.label, required=False, description=description)
    if f.placeholder:
        args["placeholder"] = f.placeholder
    if f.kind == CHOICE:
        args["dropdown_field"] = common_pb2.DropdownField(dropdown_field=list(f.choices))
        args["default_value"] = str(getattr(settings, f.key, "") or f.default)
    elif f.kind == BOOL:
        args["dropdown_field"] = common_pb2.DropdownField(dropdown_field=["auto", "true", "false"])
        args["default_value"] = "auto"
    else:
        args["text_field"] = common_pb2.Password if f.secret else common_pb2.PlainText
    return args


def configuration_form(settings: Settings) -> common_pb2.ConfigurationFormResponse:
    resp = common_pb2.ConfigurationFormResponse(schema_selection_supported=True, table_selection_supported=True)
    for f in CONNECTION_FIELDS:
        resp.fields.add(**form_field(f, settings))
    for name, label in SETUP_TESTS.items():
        resp.tests.add(name=name, label=label)
    return resp


def run_setup_test(name: str, settings: Settings, core) -> Optional[str]:
    """Returns None on success, or a message the customer can act on."""
    notice = core.engine_notice(settings)
    if notice:
        log.warning(f"Test {name}: {notice}")
    if name == TEST_ENGINE:
        silent = core.silent_engines(settings)
        if not silent:
            return None
        what = " and ".join(silent)
        return f"{what[0].upper()}{what[1:]} did not answer. Check the Spark Connect URL and that the server is running."
    if name == TEST_WAREHOUSE:
        return core.probe(settings)
    return f"unknown test {name}"
