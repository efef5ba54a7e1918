"""Issue 37's column-change timings: each change (widen, rename, drop, add, add with a default) on a
20-column table of N rows, through a real destination server, with the data files each change added
and removed read from the Delta log (docs/benchmarks.md, "Column changes (issue 37)").

The table is created by the server (CreateTable: the default engine's table, no column mapping) and
filled with delta-rs directly (a bulk append of N rows: the timing is of the changes, not the load).
`--engine auto` and `--engine spark` both reach the Apache Spark server given (`--spark-remote`, warm),
so no figure includes a JVM start. Run: python -m bench.columns.run --rows 1000000 --engine auto --spark-remote sc://...
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

from testkit.delta_read import commits_kinds, delta_version
from testkit.fivetran_requests import col, table
from testkit.server_process import RunningServer
from delta_destination.doors.fivetran._proto import common_pb2, destination_sdk_pb2 as pb

INTS, TEXTS, DOUBLES = 6, 6, 6


def columns(renamed=False, dropped=False, widened=False, added=()):
    out = [col("id", "LONG", pk=True)]
    out += [col(f"i{k}", "LONG" if widened and k == 0 else "INT") for k in range(INTS)]
    out += [col("s0r" if renamed and k == 0 else f"s{k}", "STRING") for k in range(TEXTS) if not (dropped and k == 1)]
    out += [col(f"d{k}", "DOUBLE") for k in range(DOUBLES)]
    out += [col("_fivetran_synced", "UTC_DATETIME")]
    return out + list(added)


def rows(n: int, start: int) -> pa.Table:
    rng = np.random.default_rng(start)
    data = {"id": pa.array(np.arange(start, start + n, dtype=np.int64))}
    data.update({f"i{k}": pa.array(rng.integers(0, 2**31 - 1, n, dtype=np.int32)) for k in range(INTS)})
    data.update({f"s{k}": pa.array([f"text-{k}-{x}" for x in rng.integers(0, 10**9, n)]) for k in range(TEXTS)})
    data.update({f"d{k}": pa.array(rng.random(n)) for k in range(DOUBLES)})
    data["_fivetran_synced"] = pa.array(np.full(n, 1_700_000_000_000_000, dtype="datetime64[us]")).cast(
        pa.timestamp("us", tz="UTC"))
    return pa.table(data)


def files_changed(path, first, last):
    added = removed = 0
    for v in range(first, last + 1):
        with open(f"{path}/_delta_log/{v:020d}.json") as f:
            for line in f:
                a = json.loads(line)
                added += "add" in a
                removed += "remove" in a
    return added, removed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--spark-remote", required=True)
    ap.add_argument("--changes", default="widen,rename,drop,add,add_default")
    ap.add_argument("--column-changes", default="in_place")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench37-"))
    srv = RunningServer(base / "wh", base / "server.log", ("--engine", args.engine, "--spark-remote", args.spark_remote,
                                                                 "--column-changes", args.column_changes))
    stub, path = srv.stub, f"{srv.warehouse}/s/w"
    try:
        assert stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=table("w", *columns()))).success
        chunk = 1_000_000
        for start in range(0, args.rows, chunk):
            write_deltalake(path, rows(min(chunk, args.rows - start), start), mode="append")
        state = dict(renamed=False, dropped=False, widened=False, added=())
        out = []
        for change in args.changes.split(","):
            v = delta_version(path)
            began = time.monotonic()
            if change == "widen":
                state["widened"] = True
                ok = stub.AlterTable(pb.AlterTableRequest(schema_name="s", table=table("w", *columns(**state)))).success
            elif change == "rename":
                state["renamed"] = True
                ok = stub.Migrate(pb.MigrateRequest(details=pb.MigrationDetails(schema="s", table="w", rename=pb.RenameOperation(
                    rename_column=pb.RenameColumn(from_column="s0", to_column="s0r"))))).WhichOneof("response") == "success"
            elif change == "drop":
                state["dropped"] = True
                ok = stub.AlterTable(pb.AlterTableRequest(schema_name="s", table=table("w", *columns(**state)),
                                                          drop_columns=True)).success
            elif change == "add":
                state["added"] = (col("extra", "INT"),)
                ok = stub.AlterTable(pb.AlterTableRequest(schema_name="s", table=table("w", *columns(**state)))).success
            elif change == "add_default":
                ok = stub.Migrate(pb.MigrateRequest(details=pb.MigrationDetails(schema="s", table="w", add=pb.AddOperation(
                    add_column_with_default_value=pb.AddColumnWithDefaultValue(
                        column="dflt", column_type=common_pb2.INT, default_value="7"))))).WhichOneof("response") == "success"
            seconds = time.monotonic() - began
            last = delta_version(path)
            added, removed = files_changed(path, v + 1, last)
            ops = [op for op, _ in commits_kinds(path, v + 1, last)]
            out.append({"change": change, "ok": ok, "seconds": round(seconds, 2), "commits": len(ops), "ops": ops,
                        "files_added": added, "files_removed": removed})
            print(json.dumps({"rows": args.rows, "engine": args.engine, "column_changes": args.column_changes, **out[-1]}),
                  flush=True)
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
