"""Iceberg on through the other doors (settings iceberg=metadata and an Iceberg SQL catalog,
docs/iceberg.md): the Airbyte door over real pipes (append_dedup and overwrite's swap of its
staging table) and the Conduit connector as a real plugin process. After each, the table loaded by
name from the catalog with pyiceberg's own SqlCatalog reads as the Delta table (delta-rs) at its
newest version, and the door's working tables have no entry."""
from __future__ import annotations

import json
import sqlite3

from testkit.airbyte_cli import engine, record, run, stream, stream_state, write_json  # noqa: F401
from testkit.conduit_host import CREATE, DELETE, UPDATE, record as cdc_record
from testkit.conduit_records import connector_config
from testkit.iceberg_read import assert_catalog_in_step, catalog_reader

NAME = "lake"


def iceberg(db) -> dict:
    return {"iceberg": "metadata", "iceberg_catalog_uri": f"sqlite:///{db}", "iceberg_catalog_name": NAME}


def entries(db) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return sorted(c.execute("SELECT table_namespace, table_name FROM iceberg_tables").fetchall())


def test_airbyte_dedup_and_overwrite_keep_iceberg_and_the_catalog_in_step(tmp_path, engine, door_process):
    wh, db = tmp_path / "warehouse", tmp_path / "catalog.db"
    config = write_json(tmp_path / "config.json", {"warehouse": str(wh), "engine": engine, **door_process(engine),
                                                   **iceberg(db)})
    props = {"id": {"type": "integer"}, "v": {"type": ["null", "string"]}, "cur": {"type": "integer"}}
    dedup = write_json(tmp_path / "dedup.json", {"streams": [
        stream("d", props, "append_dedup", pk=["id"], cursor="cur", generation=1, minimum=0)]})
    assert run(["write", "--config", config, "--catalog", dedup],
               [record("d", {"id": i, "v": "a", "cur": 1}) for i in range(1, 6)] + [stream_state("d", {"n": 1})]).rc == 0
    assert run(["write", "--config", config, "--catalog", dedup],
               [record("d", {"id": 2, "v": "b", "cur": 2}),
                record("d", {"id": 3, "v": "gone", "cur": 2, "_ab_cdc_deleted_at": "2024-01-01T00:00:00Z"}),
                record("d", {"id": 9, "v": "new", "cur": 2}), stream_state("d", {"n": 2})]).rc == 0
    assert_catalog_in_step(catalog_reader(NAME, db), "airbyte", "d", str(wh / "airbyte" / "d"))

    for generation, values in ((1, "old"), (2, "new")):
        snap = write_json(tmp_path / f"snap{generation}.json", {"streams": [
            stream("snap", props, "overwrite", generation=generation, minimum=generation)]})
        assert run(["write", "--config", config, "--catalog", snap],
                   [record("snap", {"id": i + 10 * generation, "v": values, "cur": 1}) for i in range(3)]
                   + [stream_state("snap", {"n": generation})]).rc == 0
        assert_catalog_in_step(catalog_reader(NAME, db), "airbyte", "snap", str(wh / "airbyte" / "snap"))
    assert {r["v"] for r in catalog_reader(NAME, db).load_table(("airbyte", "snap")).scan().to_arrow().to_pylist()} \
        == {"new"}
    assert entries(db) == [("airbyte", "d"), ("airbyte", "snap")]        # no entry of a staging table


def test_conduit_batches_keep_iceberg_and_the_catalog_in_step(plugin, tmp_path):
    wh, db = tmp_path / "wh", tmp_path / "catalog.db"
    p = plugin()
    run_ = p.open(connector_config(wh, **{"sdk.batch.size": 4, "sdk.batch.delay": "200ms"}, **iceberg(db)))
    meta = {"opencdc.collection": "users"}
    recs = [cdc_record(i, CREATE, key={"id": i}, after={"id": i, "name": f"user{i}"}, metadata=meta)
            for i in range(1, 9)]
    recs += [cdc_record(9, UPDATE, key={"id": 2}, after={"id": 2, "name": "renamed"}, metadata=meta),
             cdc_record(10, DELETE, key={"id": 5}, metadata=meta)]
    run_.send(*recs)
    acks = run_.wait_acks(len(recs))
    assert [a.error for a in acks] == [""] * len(recs)
    p.stop(recs[-1].position)
    run_.close()
    p.teardown()
    p.kill_gracefully()
    path = str(wh / "conduit" / "users")
    assert_catalog_in_step(catalog_reader(NAME, db), "conduit", "users", path)
    rows = catalog_reader(NAME, db).load_table(("conduit", "users")).scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["name"]) for r in rows) == \
        [(1, "user1"), (2, "renamed"), (3, "user3"), (4, "user4"), (6, "user6"), (7, "user7"), (8, "user8")]
    assert json.loads(json.dumps(entries(db))) == [["conduit", "users"]]
