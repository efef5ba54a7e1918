"""The core's one reader of the Delta log (core/delta_log.py) on real tables written by delta-rs: the
table's snapshot, and the properties of a table read without delta-rs (its newest metaData action in the
JSON commits, else in its newest checkpoint) for tables delta-rs refuses."""
from __future__ import annotations

import os

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from delta_destination.core.delta_log import (checkpoint_configuration, newest_configuration, read_snapshot)
from delta_destination.warehouse import Warehouse


def table_with_property(path: str) -> None:
    write_deltalake(path, pa.table({"id": [1, 2, 3]}))
    DeltaTable(path).alter.set_table_properties({"fivetran.marker": "1"}, raise_if_not_exists=False)
    DeltaTable(path).alter.set_table_properties({"fivetran.marker": "2"}, raise_if_not_exists=False)
    write_deltalake(path, pa.table({"id": [5]}), mode="append")


def test_the_snapshot_holds_version_properties_and_live_files(tmp_path):
    path = str(tmp_path / "s" / "t")
    table_with_property(path)
    snap = read_snapshot(Warehouse(str(tmp_path)), path)
    assert snap.version == 3 and snap.configuration["fivetran.marker"] == "2"
    assert snap.adds.num_rows == 2 and snap.fields["id"].type == "long" and snap.fields["id"].physical == "id"
    assert read_snapshot(Warehouse(str(tmp_path)), str(tmp_path / "s" / "missing")) is None


def test_properties_from_the_json_commits_and_from_a_checkpoint(tmp_path):
    path = str(tmp_path / "s" / "t")
    table_with_property(path)
    wh = Warehouse(str(tmp_path))
    assert newest_configuration(wh, path)["fivetran.marker"] == "2"
    assert checkpoint_configuration(wh, path) is None            # no checkpoint yet
    DeltaTable(path).create_checkpoint()
    assert checkpoint_configuration(wh, path)["fivetran.marker"] == "2"
    # Log cleanup behind the checkpoint: the JSON commits that held metaData are gone.
    log = os.path.join(path, "_delta_log")
    for name in os.listdir(log):
        if name.endswith(".json") and int(name[:20]) < 3:
            os.remove(os.path.join(log, name))
    assert newest_configuration(wh, path)["fivetran.marker"] == "2"
    assert newest_configuration(wh, path, checkpoints=False) is None
