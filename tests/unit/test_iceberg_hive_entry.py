"""The pure parts of the Iceberg Hive catalog (core/iceberg/hive_catalog.py): which names the metastore
can hold, the table a new entry is, and its URI. The entries themselves against a real metastore:
tests/engines/test_iceberg_hive_catalog.py."""
from __future__ import annotations

import getpass
import socket

import pytest

from delta_destination.core.iceberg.catalogs import ForeignEntry
from delta_destination.core.iceberg.hive_catalog import (
    HiveCatalogUnavailable,
    HiveIcebergCatalog,
    NotAnIcebergEntry,
    hive_table_name,
    iceberg_hive_table,
    is_iceberg,
    owner,
    table_folder,
    thrift_address,
)
from delta_destination.errors import InvalidRequest


@pytest.mark.parametrize("name", ["with-dash", "dotted.name", "späti", "x" * 129, "", "two words"])
def test_names_the_metastore_cannot_hold_are_refused_with_the_reason(name):
    with pytest.raises(InvalidRequest, match="ASCII letters, digits and _ only, at most 128"):
        HiveIcebergCatalog("thrift://127.0.0.1:1").check("sales", name)
    with pytest.raises(InvalidRequest, match="schema name"):
        hive_table_name("schema", name)


def test_names_are_kept_in_lower_case():
    assert hive_table_name("table", "Orders_2024") == "orders_2024"
    assert hive_table_name("table", "x" * 128) == "x" * 128
    HiveIcebergCatalog("thrift://127.0.0.1:1").check("Sales", "Orders")   # nothing to say, no connection made


def test_a_new_entry_is_an_external_iceberg_table_at_the_tables_folder():
    t = iceberg_hive_table("sales", "orders", "s3://b/wh/sales/orders/metadata/v3.metadata.json", "etl", 1700000000)
    assert (t.dbName, t.tableName, t.owner, t.tableType) == ("sales", "orders", "etl", "EXTERNAL_TABLE")
    assert t.parameters == {"EXTERNAL": "TRUE", "table_type": "ICEBERG",
                            "metadata_location": "s3://b/wh/sales/orders/metadata/v3.metadata.json"}
    assert t.sd.location == "s3a://b/wh/sales/orders"     # Hadoop's spelling, for the metastore itself
    assert t.sd.cols == []                                # the schema is the metadata file's
    assert is_iceberg(t)
    t.parameters["table_type"] = "iceberg"
    assert is_iceberg(t)                                  # Iceberg's readers compare without case
    t.parameters = {"spark.sql.sources.provider": "delta"}
    assert not is_iceberg(t)


def test_an_entry_only_ever_names_a_file_of_a_metadata_folder():
    assert table_folder("/wh/s/t/metadata/v1.metadata.json") == "/wh/s/t"
    with pytest.raises(ValueError):
        table_folder("/wh/s/t/v1.metadata.json")


def test_the_uri_is_a_host_and_a_port():
    assert thrift_address("thrift://hms:9999") == ("hms", 9999)
    with pytest.raises(InvalidRequest):
        thrift_address("thrift:///nohost")


def test_a_table_that_is_not_iceberg_is_a_foreign_entry():
    assert issubclass(NotAnIcebergEntry, ForeignEntry)   # publish leaves it as any foreign entry


def test_a_metastore_that_does_not_answer_is_a_typed_error():
    with socket.socket() as s:      # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(HiveCatalogUnavailable, match=f"127.0.0.1:{port} did not answer"):
        HiveIcebergCatalog(f"thrift://127.0.0.1:{port}").entry("sales", "orders")


def test_an_entry_has_an_owner_even_where_the_user_has_no_name(monkeypatch):
    assert owner() == getpass.getuser()

    def nameless():
        raise KeyError("getpwuid(): uid not found: 1000650000")
    monkeypatch.setattr(getpass, "getuser", nameless)
    assert owner() == "delta_destination"
