"""Canonical dataset URIs against a golden table (testkit/dataset_uris.py). Airflow's OWN normaliser
judges the same table in tests/clients/test_lineage_uris_airflow.py.
"""
from __future__ import annotations

import os

import pytest

from delta_destination.errors import UnsafeName
from delta_destination.lineage.uris import (
    UnusableLocation,
    location_uri,
    openlineage_name,
    table_uri,
)
from delta_destination.core.table_dirs import table_location
from delta_destination.warehouse import Warehouse
from testkit.dataset_uris import GOLDEN, IDS

SECRETS = ("secret", "AKIAX", "sig=", "xyz", "user@")


@pytest.mark.parametrize("root,schema,table,uri,ns,name,_", GOLDEN, ids=IDS)
def test_golden_uri_and_openlineage_name(root, schema, table, uri, ns, name, _):
    got = table_uri(root, schema, table)
    assert got == uri
    ol = openlineage_name(got)
    assert (ol.namespace, ol.name) == (ns, name)
    assert not any(s in got for s in SECRETS), "credentials must never reach a URI"


@pytest.mark.parametrize("root,schema,table,uri,ns,name,_", GOLDEN, ids=IDS)
def test_uri_from_the_core_location_is_the_same(root, schema, table, uri, ns, name, _):
    """The core's events carry the table location; it must give the same URI as the root."""
    wh = Warehouse(root if "://" in root else os.path.abspath(root))
    if "://" in root:
        wh = Warehouse(root.rstrip("/"))
    assert location_uri(table_location(wh, schema, table), schema, table) == uri


def test_canonical_uri_is_idempotent_as_a_root():
    for root, schema, table, uri, *_ in GOLDEN:
        # A canonical table URI used as a warehouse root gives the same prefix back.
        assert table_uri(uri, "x", "y") == uri + "/x/y"


def test_unusable_roots_and_names_are_refused():
    with pytest.raises(UnusableLocation):
        table_uri("s3://", "s", "t")
    with pytest.raises(UnusableLocation):
        table_uri("gs:///only/a/path", "s", "t")
    with pytest.raises(UnsafeName):
        table_uri("/tmp/wh", "s", "../t")
    with pytest.raises(UnsafeName):
        table_uri("/tmp/wh", "_fivetran_staging", "t")
    with pytest.raises(UnusableLocation):
        location_uri("/tmp/wh/other/t", "s", "t")
