"""Parquet batch files (Capabilities answers PARQUET when the server is started with
--batch-file-format parquet): every tester input passes, and CSV and Parquet runs of the
same scenario give identical Delta tables."""
from __future__ import annotations

import hashlib
from datetime import datetime, timezone

import pytest

from testkit import tester as tc
from testkit.server_process import TESTER_INPUTS
from testkit.delta_read import read_delta_table
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.batch_files import Compression, FileFormat

INPUT_FILES = tc.input_files(TESTER_INPUTS)


def test_capabilities_parquet(parquet_server):
    assert parquet_server.stub.Capabilities(pb.CapabilitiesRequest()).batch_file_format == pb.PARQUET


@pytest.mark.parametrize("rel", INPUT_FILES)
def test_tester_input_parquet(parquet_server, rel):
    schema = "pq_" + hashlib.sha1(rel.encode()).hexdigest()[:10]
    r = tc.run_input_file(parquet_server.stub, parquet_server.warehouse, TESTER_INPUTS / rel, schema,
                          live_only=False, compression=Compression.OFF, file_format=FileFormat.PARQUET)
    assert r.ok, "\n".join(r.problems)


def _tables(warehouse, schema, names):
    out = {}
    for n in names:
        t = read_delta_table(f"{warehouse}/{schema}/{n}")
        out[n] = sorted(map(repr, t.to_pylist()))
    return out


def test_csv_and_parquet_give_identical_tables(server, parquet_server, unique_schema):
    # Schemas of the test's own: the Parquet server is shared by every engine's run of this test.
    csv_schema, pq_schema = f"{unique_schema}_csv", f"{unique_schema}_pq"
    start = datetime(2024, 3, 4, 5, 6, 7, 890000, tzinfo=timezone.utc)
    a = tc.run_input_file(server.stub, server.warehouse, TESTER_INPUTS / "input.json", csv_schema, live_only=False,
                          compression=Compression.ZSTD, start_time=start, seed=3)
    b = tc.run_input_file(parquet_server.stub, parquet_server.warehouse, TESTER_INPUTS / "input.json", pq_schema,
                          live_only=False, compression=Compression.OFF, file_format=FileFormat.PARQUET,
                          start_time=start, seed=3)
    assert a.ok and b.ok, (a.problems, b.problems)
    names = ["transaction", "campaign", "composite_table"]
    ta, tb = _tables(server.warehouse, csv_schema, names), _tables(parquet_server.warehouse, pq_schema, names)
    assert ta == tb
    assert sum(len(v) for v in ta.values()) > 0
