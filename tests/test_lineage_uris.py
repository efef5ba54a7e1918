"""Canonical dataset URIs: a golden table, and Airflow's OWN normaliser as the judge.

Airflow runs in a test-only venv (scripts/airflow_test_venv.sh, ./.airflow-venv) and is asked
through a subprocess (testkit/airflow_uris.py), so it never enters the project's environment.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from delta_destination.errors import UnsafeName
from delta_destination.lineage.uris import (
    UnusableLocation,
    location_uri,
    openlineage_name,
    table_uri,
)
from delta_destination.warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[1]
ACCT = "acct.dfs.core.windows.net"

# (warehouse root, schema, table, canonical URI, OpenLineage namespace, OpenLineage name, Airflow agrees on the raw location)
GOLDEN = [
    ("/tmp/wh", "sales", "orders", "file:///tmp/wh/sales/orders", "file", "/tmp/wh/sales/orders", True),
    ("/tmp/wh/", "sales", "orders", "file:///tmp/wh/sales/orders", "file", "/tmp/wh/sales/orders", True),
    ("/tmp/my wh", "s p", "a#b?c", "file:///tmp/my%20wh/s=20p/a=23b=3Fc", "file", "/tmp/my%20wh/s=20p/a=23b=3Fc", False),
    ("/tmp/wh", "ventes", "données", "file:///tmp/wh/ventes/donn=C3=A9es", "file", "/tmp/wh/ventes/donn=C3=A9es", False),
    ("/tmp/wh", "s", "100%", "file:///tmp/wh/s/100=25", "file", "/tmp/wh/s/100=25", False),
    ("file:///tmp/wh/", "s", "t", "file:///tmp/wh/s/t", "file", "/tmp/wh/s/t", True),
    ("file://localhost/tmp/wh", "s", "t", "file:///tmp/wh/s/t", "file", "/tmp/wh/s/t", False),
    ("s3://lake/wh", "sales", "orders", "s3://lake/wh/sales/orders", "s3://lake", "wh/sales/orders", True),
    ("S3://lake/wh/", "sales", "orders", "s3://lake/wh/sales/orders", "s3://lake", "wh/sales/orders", True),
    ("s3a://lake/wh", "sales", "orders", "s3://lake/wh/sales/orders", "s3://lake", "wh/sales/orders", False),
    ("s3n://lake", "sales", "orders", "s3://lake/sales/orders", "s3://lake", "sales/orders", False),
    ("s3a://AKIAX:secret@lake/wh", "s", "t", "s3://lake/wh/s/t", "s3://lake", "wh/s/t", False),
    ("s3://AKIAX:secret@lake/wh", "s", "t", "s3://lake/wh/s/t", "s3://lake", "wh/s/t", True),
    ("s3a://user@lake/wh", "s", "t", "s3://lake/wh/s/t", "s3://lake", "wh/s/t", False),
    ("gs://bkt/wh?b=2&a=1#frag", "s", "t", "gs://bkt/wh/s/t", "gs://bkt", "wh/s/t", False),
    ("gcs://bkt/wh", "s", "t", "gs://bkt/wh/s/t", "gs://bkt", "wh/s/t", False),
    ("gs://bkt/deep/er/wh", "s", "t", "gs://bkt/deep/er/wh/s/t", "gs://bkt", "deep/er/wh/s/t", True),
    (f"abfss://cont@{ACCT}/wh", "s", "t", f"abfss://cont@{ACCT}/wh/s/t", f"abfss://cont@{ACCT}", "wh/s/t", True),
    (f"ABFS://cont@{ACCT}/wh", "s", "t", f"abfss://cont@{ACCT}/wh/s/t", f"abfss://cont@{ACCT}", "wh/s/t", False),
    (f"abfss://cont:sas-secret@{ACCT}/wh?sig=xyz", "s", "t", f"abfss://cont@{ACCT}/wh/s/t",
     f"abfss://cont@{ACCT}", "wh/s/t", False),
    ("wasb://cont@acct.blob.core.windows.net/wh", "s", "t", "wasbs://cont@acct.blob.core.windows.net/wh/s/t",
     "wasbs://cont@acct.blob.core.windows.net", "wh/s/t", False),
    ("hdfs://nn:8020/wh", "s", "t", "hdfs://nn:8020/wh/s/t", "hdfs://nn:8020", "wh/s/t", True),
]
IDS = [f"{c[0]}|{c[2]}" for c in GOLDEN]
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
    assert location_uri(wh.table_location(schema, table), schema, table) == uri


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


# ---- Airflow's own normaliser -------------------------------------------------------------------

@pytest.fixture(scope="module")
def airflow(airflow_venv):
    """Ask Airflow (in its own venv, built by `make airflow-venv`) what it makes of a list of URIs."""
    python = airflow_venv

    def ask(uris: list[str], tmp: Path) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OPENLINEAGE"))}
        env["AIRFLOW_HOME"] = str(tmp)
        out = subprocess.run([str(python), str(ROOT / "testkit" / "airflow_uris.py")], input=json.dumps(uris),
                             capture_output=True, text=True, env=env, timeout=300, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    return ask


def test_airflow_registers_the_handlers_we_compare_with(airflow, tmp_path):
    got = airflow([], tmp_path)
    assert {"file", "s3", "gs"} <= set(got["handlers"])
    assert {"file", "s3", "gs"} <= set(got["converters"])


def test_our_uris_are_fixed_points_of_airflow_and_match_its_openlineage_names(airflow, tmp_path):
    ours = [table_uri(root, s, t) for root, s, t, *_ in GOLDEN]
    got = airflow(ours, tmp_path)["results"]
    for (root, _s, _t, uri, ns, name, _), res in zip(GOLDEN, got):
        assert res.get("asset_uri") == uri, (root, res)
        scheme = uri.split("://", 1)[0]
        if scheme in ("file", "s3", "gs"):
            assert res.get("openlineage") == [ns, name], (root, res)


def test_airflow_gives_our_uri_for_the_raw_location_where_it_normalises_the_same(airflow, tmp_path):
    """Where Airflow's rules already reach the canonical form (no alias, no bare user info,
    no query), Airflow applied to the raw table location gives exactly our URI."""
    cases = [c for c in GOLDEN if c[6]]
    raw = []
    for root, schema, table, *_ in cases:
        if "://" in root:
            raw.append(root.rstrip("/") + f"/{schema}/{table}/")
        else:  # Airflow's own factory for local paths
            raw.append("file://" + os.path.join(os.path.abspath(root), schema, table) + "/")
    got = airflow(raw, tmp_path)["results"]
    for (root, _s, _t, uri, *_), res in zip(cases, got):
        assert res.get("asset_uri") == uri, (root, res)


def test_airflow_refuses_what_we_refuse(airflow, tmp_path):
    got = airflow(["s3://", "gs://"], tmp_path)["results"]
    assert all(r.get("error") == "ValueError" for r in got), got
