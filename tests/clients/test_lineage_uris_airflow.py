"""Canonical dataset URIs with Airflow's OWN normaliser as the judge, on the golden table of
testkit/dataset_uris.py (tests/unit/test_lineage_uris.py checks the table itself).

Airflow runs in a test-only venv (scripts/airflow_test_venv.sh, ./.airflow-venv) and is asked
through a subprocess (testkit/airflow_uris.py), so it never enters the project's environment.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from delta_destination.lineage.uris import table_uri
from testkit.dataset_uris import GOLDEN

ROOT = Path(__file__).resolve().parents[2]


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
