"""A table created by one engine and written by the other, on the public tester inputs.

Two servers share one warehouse: the first (one engine) creates the tables and applies the
first half of the operations, the second (the other engine) applies the rest, the
migrations and the describes; the reference model and delta-rs check the result. Spark
creates tables with deletion vectors and column mapping, which Sail 0.7.2 reads and writes
(measured: its MERGE keeps rows removed by a vector removed, and it writes physical column
names); a table Sail created is a plain Delta table to Spark.
"""
from __future__ import annotations

import hashlib

import pytest

from testkit import tester as tc
from testkit.server_process import TESTER_INPUTS

# (input, history variant?): the ddl/dml files have no history-mode table, so their live run is the only one.
CASES = [("input.json", False), ("input.json", True), ("schema_migrations_input_sync_modes.json", False),
         ("schema_migrations_input_sync_modes.json", True), ("schema_migrations_input_ddl.json", True),
         ("schema_migrations_input_dml.json", True)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory, dedicated_server):
    base = tmp_path_factory.mktemp("cross")
    servers = {e: dedicated_server(base / "warehouse", base / f"{e}.log", engine=e) for e in ("sail", "spark")}
    yield servers
    for s in servers.values():
        s.stop()


@pytest.mark.parametrize("direction", ["sail>spark", "spark>sail"])
@pytest.mark.parametrize("rel,live_only", CASES, ids=[f"{r}-{'live' if lo else 'history'}" for r, lo in CASES])
def test_tables_move_between_engines(pair, rel, live_only, direction):
    first, second = direction.split(">")
    spec = tc.load_input(TESTER_INPUTS / rel)
    half = len(spec.get("ops") or []) // 2
    schema = f"x_{first}_{'h' if not live_only else 'l'}_{hashlib.sha1(rel.encode()).hexdigest()[:8]}"
    log = []
    result = tc.run_spec(pair[first].stub, pair[first].warehouse, spec, schema, live_only=live_only,
                         run_migrations=rel.startswith("schema_migrations_"), log=log.append,
                         handover=(half, pair[second].stub))
    assert result.ok, "\n".join(result.problems + log[-30:])


def _log_actions(path):
    """Every commit's (operation, actions) in order, read from the Delta log files."""
    import json
    import os

    log_dir = os.path.join(path, "_delta_log")
    out = []
    for name in sorted(n for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit()):
        with open(os.path.join(log_dir, name), encoding="utf-8") as f:
            actions = [json.loads(line) for line in f if line.strip()]
        op = next((a["commitInfo"].get("operation") for a in actions if "commitInfo" in a), None)
        out.append((op, actions))
    return out


def _protocol(path):
    return [a["protocol"] for _, acts in _log_actions(path) for a in acts if "protocol" in a][-1]


def test_columns_changed_in_place_move_between_engines(pair, tmp_path, dedicated_server):
    """Spark renames and drops columns of its own tables in place (column mapping); Sail then
    reads, upserts, renames and drops (its rewrites). A table Sail created has no column
    mapping: under `column_changes` = `rewrite` Spark rewrites it instead and never upgrades its
    protocol, so Sail keeps writing (under `in_place`, the default, Spark upgrades it:
    tests/engines/test_column_mapping_upgrade.py).
    Each table is handed over once, as between deployments: a server's cached metadata
    assumes nobody else changes its tables' schemas meanwhile."""
    from testkit.fivetran_requests import batch_file, col, columns_of, describe, table, write_request
    from testkit.delta_read import delta_properties, read_delta_table
    from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
    import datetime as dt

    sync = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    schema = "x_inplace"
    wh = pair["spark"].warehouse

    def rename(stub, name, old, new, configuration=None):
        r = stub.Migrate(pb.MigrateRequest(configuration=configuration or {}, details=pb.MigrationDetails(schema=schema, table=name, rename=pb.RenameOperation(
            rename_column=pb.RenameColumn(from_column=old, to_column=new)))))
        assert r.WhichOneof("response") == "success", r

    def write(stub, t, rows):
        assert stub.WriteBatch(write_request(schema, t, replace=[batch_file(tmp_path, t, rows)])).success

    def rows(path):
        return sorted(tuple(sorted(r.items())) for r in read_delta_table(path).to_pylist())

    def expected(values, j="j", new="renamed é"):
        return sorted(tuple(sorted({"id": i, new: s, j: v, "_fivetran_synced": sync}.items()))
                      for i, s, v in values)

    def data_ops(path):
        return [op for op, acts in _log_actions(path) if any("add" in a or "remove" in a for a in acts)]

    def start(stub, name, a, c):
        t = table(name, col("id", "INT", pk=True), col(a, "STRING"), col(c, "LONG"), col("j", "JSON"),
                  col("_fivetran_synced", "UTC_DATETIME"))
        assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=t)).success
        write(stub, t, [{"id": 1, a: "x", c: 1, "j": "{}", "_fivetran_synced": sync},
                        {"id": 2, a: "y", c: 2, "j": None, "_fivetran_synced": sync}])
        return f"{wh}/{schema}/{name}"

    def rename_and_drop(stub, name, a, new, configuration=None):
        rename(stub, name, a, new, configuration)
        t = table(name, col("id", "INT", pk=True), col(new, "STRING"), col("j", "JSON"),
                  col("_fivetran_synced", "UTC_DATETIME"))
        assert stub.AlterTable(pb.AlterTableRequest(schema_name=schema, table=t, drop_columns=True,
                                                    configuration=configuration or {})).success
        return t

    def described(stub, name):
        return columns_of(describe(stub, schema, name))

    def after_rename(new="renamed é"):
        return {"id": ("INT", True, None), new: ("STRING", False, None), "j": ("JSON", False, None),
                "_fivetran_synced": ("UTC_DATETIME", False, None)}

    # Spark's own table: in place, then Sail takes over
    path = start(pair["spark"].stub, "by_spark", "a b", "c=d")
    assert delta_properties(path)["delta.columnMapping.mode"] == "name"
    t = rename_and_drop(pair["spark"].stub, "by_spark", "a b", "renamed é")
    assert data_ops(path) == ["WRITE"]  # only the first write: the rename and the drop touched no data file
    assert rows(path) == expected([(1, "x", "{}"), (2, "y", None)])
    sail = pair["sail"].stub
    assert described(sail, "by_spark") == after_rename()
    write(sail, t, [{"id": 2, "renamed é": "y2", "j": "[2]", "_fivetran_synced": sync},
                    {"id": 3, "renamed é": "z", "j": None, "_fivetran_synced": sync}])
    assert rows(path) == expected([(1, "x", "{}"), (2, "y2", "[2]"), (3, "z", None)])
    rename(sail, "by_spark", "j", "j2")  # Sail rewrites the column-mapped table
    assert described(sail, "by_spark")["j2"] == ("JSON", False, None)
    write(sail, table("by_spark", col("id", "INT", pk=True), col("renamed é", "STRING"), col("j2", "JSON"),
                      col("_fivetran_synced", "UTC_DATETIME")),
          [{"id": 1, "renamed é": "x1", "j2": None, "_fivetran_synced": sync}])
    assert rows(path) == expected([(1, "x1", None), (2, "y2", "[2]"), (3, "z", None)], j="j2")
    assert delta_properties(path)["delta.columnMapping.mode"] == "name"

    # Sail's table under `rewrite`: Spark rewrites it (no column mapping to use) and leaves its protocol alone.
    # (Names like `a b` need column mapping on Delta: Spark refuses to write them into such a table.)
    path = start(pair["sail"].stub, "by_sail", "a_b", "c_d")
    protocol = _protocol(path)
    assert "delta.columnMapping.mode" not in delta_properties(path)
    t = rename_and_drop(pair["spark"].stub, "by_sail", "a_b", "renamed_é", {"column_changes": "rewrite"})
    assert data_ops(path) == ["WRITE", "WRITE", "WRITE"]  # the first write and two rewrites
    assert "delta.columnMapping.mode" not in delta_properties(path) and _protocol(path) == protocol
    assert rows(path) == expected([(1, "x", "{}"), (2, "y", None)], new="renamed_é")
    # A name Delta needs column mapping for: Spark refuses it in Sail's table with a clear error, nothing changes
    version = len(_log_actions(path))
    import grpc
    from testkit.fivetran_requests import expect_error
    wide = table("by_sail", *t.columns, col("new col", "STRING"))
    err = expect_error(lambda: pair["spark"].stub.AlterTable(pb.AlterTableRequest(schema_name=schema, table=wide)),
                       grpc.StatusCode.UNIMPLEMENTED)
    assert "no column mapping" in err.details() and "DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES" in err.details()
    assert all(not ({"add", "remove"} & set().union(*acts)) for _, acts in _log_actions(path)[version:])
    assert described(pair["spark"].stub, "by_sail") == after_rename("renamed_é")
    fresh = dedicated_server(wh, tmp_path / "sail2.log", engine="sail")  # the next deployment, on Sail again
    try:
        assert described(fresh.stub, "by_sail") == after_rename("renamed_é")
        write(fresh.stub, t, [{"id": 2, "renamed_é": "y2", "j": "[2]", "_fivetran_synced": sync}])
        assert rows(path) == expected([(1, "x", "{}"), (2, "y2", "[2]")], new="renamed_é")
    finally:
        fresh.stop()
