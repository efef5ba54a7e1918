"""The catalog interface without an engine: which catalog the settings name, how the core keeps it
in step with the tables (working tables left out), and the Hive Metastore's names."""
from __future__ import annotations

from typing import Optional

import pytest

from delta_destination.core.catalogs import CATALOGS, Catalog, RegisteredTables, catalog_for
from delta_destination.core.catalogs.hive import HiveMetastore, hive_name
from delta_destination.errors import InvalidRequest
from delta_destination.settings import Settings

HIVE = Settings.create("/wh", catalog_uri="thrift://127.0.0.1:9083")


class Recorded(Catalog):
    """A catalog that records what it is asked."""

    def __init__(self, settings, router, calls: list):
        self.calls = calls

    def check(self, schema, table):
        self.calls.append(("check", schema, table))

    def register(self, schema, table, location):
        self.calls.append(("register", schema, table, location))

    def rename(self, schema, old, new, location):
        self.calls.append(("rename", schema, old, new, location))

    def drop(self, schema, table):
        self.calls.append(("drop", schema, table))

    def describe(self, schema, table) -> Optional[str]:
        self.calls.append(("describe", schema, table))
        return "/wh/s/t"


@pytest.fixture
def recorded(monkeypatch):
    calls: list = []
    monkeypatch.setitem(CATALOGS, "thrift", lambda settings, router: Recorded(settings, router, calls))
    return calls


def test_no_catalog_uri_no_catalog_and_nothing_runs(recorded):
    plain = Settings.create("/wh")
    assert catalog_for(plain, None) is None
    tables = RegisteredTables(None, lambda schema, table: False)
    tables.check(plain, "s", "t")
    tables.register(plain, "s", "t", "/wh/s/t")
    tables.rename(plain, "s", "t", "u", "/wh/s/u", "/wh/s/t")
    tables.drop(plain, "s", "t", "/wh/s/t")
    assert tables.describe(plain, "s", "t") is None
    assert recorded == []


def test_the_hive_metastore_by_its_uri_scheme():
    assert isinstance(catalog_for(HIVE, None), HiveMetastore)


def test_a_catalog_uri_of_no_known_catalog_is_refused(monkeypatch):
    monkeypatch.delitem(CATALOGS, "thrift")
    with pytest.raises(InvalidRequest, match="names no catalog"):
        catalog_for(HIVE, None)


def test_working_tables_have_no_entry_and_a_staging_rename_registers_the_new_name(recorded):
    staging = lambda schema, table: table.startswith("_stage_")  # noqa: E731
    tables = RegisteredTables(None, staging)
    tables.check(HIVE, "s", "_stage_t")
    tables.register(HIVE, "s", "_stage_t", "/wh/s/_stage_t")
    tables.drop(HIVE, "s", "_stage_t", "/wh/s/_stage_t")
    assert recorded == []
    tables.rename(HIVE, "s", "_stage_t", "t", "/wh/s/t", "/wh/s/_stage_t")     # staging -> real: only the new entry
    tables.rename(HIVE, "s", "t", "_stage_t", "/wh/s/_stage_t", "/wh/s/t")   # real -> staging: only the old entry goes
    tables.rename(HIVE, "s", "t", "u", "/wh/s/u", "/wh/s/t")
    assert recorded == [("register", "s", "t", "/wh/s/t"), ("drop", "s", "t"), ("rename", "s", "t", "u", "/wh/s/u")]
    assert tables.describe(HIVE, "s", "u") == "/wh/s/t"


def test_hive_names_are_checked_before_anything_is_written():
    metastore = HiveMetastore(HIVE, None)   # no engine: a refused name never reaches one
    metastore.check("Sales", "Orders_2024")
    with pytest.raises(InvalidRequest, match="cannot be registered in the Hive Metastore"):
        metastore.check("sales", "order lines")
    assert hive_name("schema", "Sales") == "sales"
    metastore.drop("sales", "order lines")   # never registered: nothing to do, no engine asked
    assert metastore.describe("sales", "order lines") is None
