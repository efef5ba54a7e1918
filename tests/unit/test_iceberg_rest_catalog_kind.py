"""The REST catalog kind (core/iceberg/rest_catalog.py) without a server: what its URL may say, the
names it refuses, and that neither the settings nor a name check reach the server (so a REST catalog
that cannot be reached never fails a CreateTable; tests/engines/test_iceberg_rest_catalog.py has the
real server)."""
from __future__ import annotations

import socket

import pytest

from delta_destination.core.iceberg.catalogs import catalog_kind, iceberg_catalog_for
from delta_destination.core.iceberg.rest_catalog import RestIcebergCatalog
from delta_destination.errors import InvalidRequest
from delta_destination.settings import Settings


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_and_https_urls_are_rest_catalogs(tmp_path):
    assert catalog_kind("http://127.0.0.1:8181") == "http" and catalog_kind("https://c.example/api") == "https"
    settings = Settings.create(str(tmp_path / "wh"), iceberg="metadata",
                               iceberg_catalog_uri=f"http://127.0.0.1:{closed_port()}/cat?warehouse=lake")
    catalog = iceberg_catalog_for(settings)                          # no request made: nothing listens there
    assert isinstance(catalog, RestIcebergCatalog)
    assert catalog.properties == {"uri": f"{settings.iceberg_catalog_uri.split('?')[0]}", "warehouse": "lake"}
    catalog.check("schema", "table")                                 # a name check needs no server
    with pytest.raises(OSError):                                     # the first entry request does
        catalog.entry("schema", "table")


@pytest.mark.parametrize("uri, words", [
    ("http://user:pw@127.0.0.1:8181", "cannot carry credentials"),
    ("http://127.0.0.1:8181?token=t", "takes only these parameters: warehouse"),
    ("http:///no-host", "must name its host"),
])
def test_what_a_rest_catalog_url_cannot_say(uri, words):
    with pytest.raises(InvalidRequest, match=words):
        RestIcebergCatalog(uri, "client")


def test_names_the_rest_catalog_cannot_hold():
    catalog = RestIcebergCatalog("http://127.0.0.1:1", "client")
    catalog.check("Mixed Case ok", "a.b c/d")                        # a table name may hold a dot
    with pytest.raises(InvalidRequest, match="nested namespaces"):
        catalog.check("a.b", "t")
    with pytest.raises(InvalidRequest, match="separates nested namespaces"):
        catalog.check("s", "t\x1fu")
