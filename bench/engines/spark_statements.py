"""What a small request costs on the Apache Spark engine: each engine statement it sends, timed.

    .venv/bin/python -m bench.engines.spark_statements                       # the local Spark engine, as --engine spark
    .venv/bin/python -m bench.engines.spark_statements --remote sc://h:15002 # a Spark Connect server
    .venv/bin/python -m bench.engines.spark_statements --conf spark.sql.codegen.wholeStage=false ...
    .venv/bin/python -m bench.engines.spark_statements --engine auto         # the default engine (Sail here)

The core runs in this process against the engine (warmed up by one round first); for each kind of
request (CreateTable, DescribeTable, WriteBatch of `rows` changes into a table of `table_rows`) it
reports the time per request and, per engine-session call (statements, DataFrame reads, shipping), how
many and how long. `--conf` sets Spark SQL settings on the session, to try what cuts small-statement
cost (docs/performance-analysis.md has the figures).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

CALLS = ("execute", "rows", "arrow", "columns", "property_values", "create_table", "set_properties", "overwrite",
         "shipped", "has_table")


@contextmanager
def counted():
    """Counts and times every EngineSession call of CALLS (measurement only; restored after)."""
    from delta_destination.engines.session import EngineSession

    stats: dict[str, list[float]] = collections.defaultdict(list)
    saved = {n: getattr(EngineSession, n) for n in CALLS}

    def wrap(name, fn):
        if name == "shipped":
            @contextmanager
            def shipped(self, *a, **k):
                began = time.perf_counter()
                with fn(self, *a, **k) as view:
                    stats[name].append(time.perf_counter() - began)
                    yield view
            return shipped

        def inner(self, *a, **k):
            began = time.perf_counter()
            try:
                return fn(self, *a, **k)
            finally:
                stats[name].append(time.perf_counter() - began)
        return inner

    for n, fn in saved.items():
        setattr(EngineSession, n, wrap(n, fn))
    try:
        yield stats
    finally:
        for n, fn in saved.items():
            setattr(EngineSession, n, fn)


def rows(n: int, start: int, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "name": [f"{tag}{i}" for i in range(n)],
                     "qty": pa.array([1] * n, pa.int32()), "price": [1.5] * n})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="spark", help="spark (default), sail or auto")
    ap.add_argument("--remote", default=None, help="a Spark Connect URL (default: the local engine)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--rows", type=int, default=125)
    ap.add_argument("--table-rows", type=int, default=2000)
    ap.add_argument("--warehouse", default=None)
    args = ap.parse_args(argv)
    from delta_destination.core.api import DeltaCore
    from delta_destination.core.changes import ChangeSet, Changes, Op
    from delta_destination.core.model import Column, DataType, TableSchema
    from delta_destination.engines.pool import EnginePool
    from delta_destination.engines.router import EngineRouter
    from delta_destination.settings import Settings

    router = EngineRouter(EnginePool())
    core = DeltaCore(router, door="bench")
    settings = Settings.create(args.warehouse or tempfile.mkdtemp(prefix="spark-statements-"), engine=args.engine,
                               spark_remote=args.remote)
    schema = lambda name: TableSchema(name, (Column("id", DataType.LONG, primary_key=True),  # noqa: E731
                                             Column("name", DataType.STRING), Column("qty", DataType.INT),
                                             Column("price", DataType.DOUBLE)))
    with router.lease(settings) as lease:   # the session the core's requests get (auto resolved by the router)
        for kv in args.conf:
            key, _, value = kv.partition("=")
            lease.session.spark.conf.set(key, value)

    def write(table: str, data: pa.Table):
        cs = ChangeSet()
        cs.add(Changes(Op.UPSERT, data, source="bench"))
        core.writer.write(settings, "s", table, lambda _t: cs)

    report = {}
    try:
        for phase in ("warm-up", "measured"):
            with counted() as stats:
                kinds: dict[str, list[float]] = collections.defaultdict(list)
                for i in range(1 if phase == "warm-up" else args.requests):
                    name = f"{phase[0]}{i}"
                    began = time.perf_counter()
                    core.tables.create(settings, "s", schema(name))
                    kinds["CreateTable"].append(time.perf_counter() - began)
                    write(name, rows(args.table_rows, 0, "a"))                      # the initial load
                    began = time.perf_counter()
                    core.describe(settings, "s", name)
                    kinds["DescribeTable"].append(time.perf_counter() - began)
                    began = time.perf_counter()
                    write(name, rows(args.rows, args.table_rows - args.rows // 2, "b"))   # half stored keys
                    kinds["WriteBatch"].append(time.perf_counter() - began)
            if phase == "measured":
                n = args.requests
                report = {"requests": {k: round(sorted(v)[len(v) // 2], 3) for k, v in kinds.items()},
                          "calls_per_round": {k: {"count": round(len(v) / n, 2), "seconds": round(sum(v) / n, 3)}
                                              for k, v in stats.items()},
                          "conf": args.conf}
        print(json.dumps(report, indent=1))
    finally:
        router.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
