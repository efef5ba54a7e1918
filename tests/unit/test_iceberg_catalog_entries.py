"""The rules of an Iceberg catalog entry (core/iceberg/catalogs.py) on a real SQL catalog (pyiceberg's
SqlCatalog tables in a SQLite file, core/iceberg/sql_catalog.py): no server, no engine."""
from __future__ import annotations

import sqlite3

import pytest

from delta_destination.core.iceberg.catalogs import (AHEAD, CATALOG_KINDS, CURRENT, MOVE, REGISTER, ForeignEntry,
                                                     catalog_kind, forget, iceberg_catalog_for, publish)
from delta_destination.core.iceberg.sql_catalog import SqlIcebergCatalog
from delta_destination.errors import InvalidRequest
from delta_destination.settings import ICEBERG_CATALOG_SCHEMES, Settings

T = "/wh/s/t"


def meta(n: int, table: str = T) -> str:
    return f"{table}/metadata/v{n}.metadata.json"


@pytest.fixture
def catalog(tmp_path):
    return SqlIcebergCatalog(f"sqlite:///{tmp_path}/c.db", "lake")


def row(tmp_path, table="t"):
    with sqlite3.connect(tmp_path / "c.db") as c:
        return c.execute("SELECT metadata_location, previous_metadata_location FROM iceberg_tables WHERE "
                         "catalog_name='lake' AND table_namespace='s' AND table_name=?", (table,)).fetchone()


def test_every_scheme_the_settings_take_has_a_catalog_kind():
    assert set(CATALOG_KINDS) == set(ICEBERG_CATALOG_SCHEMES)
    assert catalog_kind("sqlite:////x.db") == "sqlite" and catalog_kind("mysql+pymysql://h/d") == "mysql"


def test_publish_registers_moves_forward_only_and_forget_drops(catalog, tmp_path):
    on_disk = {meta(1), meta(2), meta(5)}
    exists = on_disk.__contains__
    assert publish(catalog, "s", "t", T, meta(1), exists) == REGISTER
    assert publish(catalog, "s", "t", T, meta(1), exists) == CURRENT
    assert publish(catalog, "s", "t", T, meta(5), exists) == MOVE
    assert row(tmp_path) == (meta(5), meta(1))
    assert publish(catalog, "s", "t", T, meta(2), exists) == AHEAD      # a slower writer never moves it back
    assert row(tmp_path) == (meta(5), meta(1))
    on_disk.discard(meta(5))                                           # unless the newer file is gone
    assert publish(catalog, "s", "t", T, meta(2), exists) == MOVE
    assert forget(catalog, "s", "t", T) and row(tmp_path) is None
    assert not forget(catalog, "s", "t", T)


def test_the_move_is_a_compare_and_set(catalog, tmp_path):
    assert catalog.create_entry("s", "t", meta(1))
    assert not catalog.create_entry("s", "t", meta(2))                 # exists: no second entry
    assert not catalog.move_entry("s", "t", meta(7), meta(2))          # it does not name v7
    assert row(tmp_path) == (meta(1), None)
    assert catalog.move_entry("s", "t", meta(1), meta(2))
    catalog.drop_entry("s", "t", meta(1))                              # stale: left
    assert row(tmp_path) == (meta(2), meta(1))


def test_another_tables_entry_is_neither_moved_nor_dropped(catalog, tmp_path):
    other = meta(3, "/wh/s/other")
    catalog.create_entry("s", "t", other)
    with pytest.raises(ForeignEntry):
        publish(catalog, "s", "t", T, meta(1), {other}.__contains__)
    assert not forget(catalog, "s", "t", T)
    assert row(tmp_path) == (other, None)
    assert publish(catalog, "s", "t", T, meta(1), lambda p: False) == MOVE   # its file gone: taken over


def test_names_the_sql_catalog_cannot_hold(catalog):
    catalog.check("Mixed Case ok", "a.b c")                           # a table name may hold anything
    with pytest.raises(InvalidRequest, match="nested namespaces"):
        catalog.check("a.b", "t")
    with pytest.raises(InvalidRequest, match="at most 255"):
        catalog.check("s", "x" * 256)


def test_one_catalog_object_per_uri_and_name(tmp_path):
    settings = Settings.create(str(tmp_path / "wh"), iceberg="metadata", iceberg_catalog_uri=f"sqlite:///{tmp_path}/c.db")
    assert iceberg_catalog_for(settings) is iceberg_catalog_for(settings)
    assert iceberg_catalog_for(Settings.create(str(tmp_path / "wh"))) is None


@pytest.mark.parametrize("values, words", [
    ({"iceberg_catalog_uri": "sqlite:////c.db"}, "needs iceberg set to metadata"),
    ({"iceberg": "metadata", "iceberg_catalog_uri": "ftp://rest.example/v1"}, "must be a SQLAlchemy URL"),
    ({"iceberg": "metadata", "iceberg_catalog_uri": "sqlite"}, "must be a SQLAlchemy URL"),
    ({"iceberg": "metadata", "engine": "spark", "catalog_uri": "thrift://HMS:9083",
      "iceberg_catalog_uri": "thrift://hms:9083"}, "name the same Hive Metastore"),
])
def test_settings_refuse_a_catalog_they_cannot_keep(values, words):
    with pytest.raises(InvalidRequest, match=words):
        Settings.create("/wh", **values)
