"""A warehouse root the engine cannot address is refused before anything is written.

Sail 0.7.2 percent-encodes spaces, non-ASCII, `~`, `%` and `]` in a local table location
and reads `[` as a glob, so a table under `/data/my lake` would get its log and its data
files in two differently spelled directories. Schema and table directories are spelled
safely by the warehouse (docs/names.md); the root is the user's choice, so on Sail it is
refused with an error that names the Spark engine. Apache Spark takes such roots literally.
"""
from __future__ import annotations

import os
import subprocess
import sys

import grpc
import pytest

from testkit.fivetran_requests import batch_file, col, expect_error, table, write_request
from delta_destination.errors import InvalidRequest
from delta_destination.engines.dialect import SailDialect, SparkDialect
from delta_destination.doors.fivetran._proto import common_pb2, destination_sdk_pb2 as pb
from testkit.delta_read import read_delta_table
from testkit.server_process import ROOT

HOSTILE_ROOTS = ["/data/my lake", "/data/Größe", "/data/~me", "/data/100%", "/data/a[1]", "/data/tab\there"]


@pytest.mark.parametrize("root", HOSTILE_ROOTS)
def test_sail_refuses_roots_it_would_misplace(root):
    with pytest.raises(InvalidRequest) as info:
        SailDialect().check_warehouse_root(root)
    assert "--engine spark" in info.value.message


@pytest.mark.parametrize("root", ["/data/lake", "/data/my_lake-2.v1", "/a/b+c@d,e:f=g", "s3a://bucket/my lake"])
def test_sail_takes_plain_roots_and_urls(root):
    SailDialect().check_warehouse_root(root)


@pytest.mark.parametrize("root", HOSTILE_ROOTS)
def test_spark_takes_any_root(root):
    SparkDialect().check_warehouse_root(root)


def test_server_on_sail_refuses_such_a_root_at_start(tmp_path):
    root = tmp_path / "my lake"
    r = subprocess.run([sys.executable, "-m", "delta_destination.doors.fivetran.main", "--port", "0", "--warehouse", str(root),
                        "--engine", "sail"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "embedded Sail engine cannot address (' ')" in r.stderr and "--engine spark" in r.stderr
    assert not root.exists()


def test_configured_root_is_refused_on_sail_and_works_on_spark(server, engine, unique_schema, tmp_path):
    """The request's warehouse_path override: on Sail a clear INVALID_ARGUMENT and nothing on
    disk; on Spark the table lands exactly under the root as spelled and reads back."""
    root = tmp_path / "my lake" / "Größe"
    t = table("orders", col("id", "INT", pk=True), col("name", "STRING"))
    config = {"warehouse": str(root)}
    create = pb.CreateTableRequest(schema_name=unique_schema, table=t, configuration=config)
    probe = server.stub.Test(common_pb2.TestRequest(name="warehouse_writable", configuration=config))
    if engine == "sail":
        assert probe.WhichOneof("response") == "failure" and "--engine spark" in probe.failure
        assert not root.exists()
        err = expect_error(lambda: server.stub.CreateTable(create), grpc.StatusCode.INVALID_ARGUMENT)
        assert "--engine spark" in err.details()
        assert not root.exists()
        return
    assert probe.WhichOneof("response") == "success", probe.failure
    assert server.stub.CreateTable(create).success
    path, key = batch_file(tmp_path, t, [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    req = write_request(unique_schema, t, replace=[(path, key)])
    req.configuration.update(config)
    server.stub.WriteBatch(req)
    location = root / unique_schema / "orders"
    assert sorted(os.listdir(root)) == [unique_schema]
    got = read_delta_table(str(location)).to_pylist()
    assert sorted((r["id"], r["name"]) for r in got) == [(1, "a"), (2, "b")]
