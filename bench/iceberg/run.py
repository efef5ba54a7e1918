"""What the setting `iceberg=metadata` costs per commit, on the default engine (issue 38).

    .venv/bin/python -m bench.iceberg [--small 10] [--sizes 1000000,10000] [--catalog]

One server as `make run` starts it (engine auto), two tables of bench/common/data.py's 20-column
wide table, one written with `iceberg` off and one with it on (the request's configuration), the
same batch files for both, requests alternating between them so that the machine's load falls on
both alike:

- a 1M-row WriteBatch (the initial load: one append commit);
- `--small` WriteBatch requests of 100 rows into the 1M-row table (50 updates of existing keys
  spread uniformly + 50 new keys: one MERGE each).

With `--catalog`, a third table per size has Iceberg on with an entry in a SQLite Iceberg catalog
(iceberg_catalog_uri): what moving the entry after each mirror adds.

Per request: the client's wall time; for the table with Iceberg on, also the mirror's own seconds
from the server's log line. Printed as a markdown table (medians for the small batches).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from delta_destination.core.model import TableSchema
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.convert import table_to_proto
from testkit.iceberg_read import assert_same_table
from testkit.server_process import RunningServer

from ..common import data as bd
from ..common.rpc import SCHEMA, file_params

SEED = 38
MIRRORED = re.compile(r"(\S+)\.(\w+): mirrored Delta versions up to (\d+) as \d+ Iceberg snapshot\(s\) in ([\d.]+)s")


def request(table: TableSchema, files, config: dict, create: bool = False):
    if create:
        return pb.CreateTableRequest(schema_name=SCHEMA, table=table_to_proto(table), configuration=config)
    return pb.WriteBatchRequest(schema_name=SCHEMA, table=table_to_proto(table), configuration=config,
                                keys={f.path: f.key_bytes() for f in files}, replace_files=[f.path for f in files],
                                file_params=file_params())


def timed(fn, req) -> float:
    start = time.monotonic()
    resp = fn(req, timeout=3600)
    took = time.monotonic() - start
    assert resp.success, resp
    return took


def mirror_seconds(log_path: Path, table: str) -> list[float]:
    return [float(m.group(4)) for m in MIRRORED.finditer(log_path.read_text(errors="replace")) if m.group(2) == table]


def workload(gen: bd.Generator, rows: int, small: int) -> tuple[list, list[list]]:
    """The initial batch of `rows` rows and `small` 100-row upserts (50 existing keys spread
    uniformly, 50 new) into it, the same files for both tables."""
    big = gen.wide_rows(f"initial_{rows}", np.arange(1, rows + 1, dtype=np.int64), 1)
    rng = np.random.default_rng(SEED)
    smalls = []
    for i in range(small):
        ids = np.concatenate([np.sort(rng.choice(rows, 50, replace=False) + 1),
                              np.arange(rows + 1 + 50 * i, rows + 51 + 50 * i)]).astype(np.int64)
        smalls.append(gen.wide_rows(f"small_{rows}_{i}", ids, 2 + i))
    return big, smalls


def run_size(srv: RunningServer, rows: int, big, smalls, catalog: str = "") -> dict:
    """The tables of one size: created, loaded, then the small batches alternating between them."""
    mode = {"off": {"iceberg": "off"}, "on": {"iceberg": "metadata"}}
    if catalog:
        mode["catalog"] = {"iceberg": "metadata", "iceberg_catalog_uri": catalog}
    tables = {m: TableSchema(f"wide_{rows}_{m}", bd.WIDE.columns) for m in mode}
    results = {m: {"big": None, "small": []} for m in tables}
    for m, t in tables.items():
        timed(srv.stub.CreateTable, request(t, (), mode[m], create=True))
    for m, t in tables.items():
        results[m]["big"] = timed(srv.stub.WriteBatch, request(t, big, mode[m]))
        print(f"  {t.name}: {rows:,}-row batch {results[m]['big']:.2f}s", flush=True)
    for i, files in enumerate(smalls):
        order = list(tables.items())
        for m, t in order[i % len(order):] + order[:i % len(order)]:
            results[m]["small"].append(timed(srv.stub.WriteBatch, request(t, files, mode[m])))
    assert_same_table(str(srv.warehouse / SCHEMA / tables["on"].name))   # the mirror is right, not just fast
    mirror = mirror_seconds(srv.log_path, tables["on"].name)
    results["mirror"] = {"big": mirror[1] if len(mirror) > 1 else None, "small": mirror[2:]}
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=10, help="100-row WriteBatch requests per table")
    ap.add_argument("--sizes", default="1000000,10000", help="rows of the initial batch of each pair of tables")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "bench-iceberg-cache")
    ap.add_argument("--catalog", action="store_true", help="a third table per size with a SQLite catalog entry")
    args = ap.parse_args(argv)
    gen = bd.Generator(args.cache, SEED, 1.0)
    sizes = [int(x) for x in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-iceberg-"))
    srv = RunningServer(work / "wh", work / "server.log")
    out = {}
    try:
        for rows in sizes:
            big, smalls = workload(gen, rows, args.small)
            out[rows] = run_size(srv, rows, big, smalls, f"sqlite:///{work}/catalog.db" if args.catalog else "")
    finally:
        srv.stop()
    extra = " iceberg metadata + a catalog entry: s |" if args.catalog else ""
    print(f"\n| request | iceberg off: s | iceberg metadata: s |{extra} the mirror itself: s |\n|---|---:|---:|"
          + ("---:|" if args.catalog else "") + "---:|")
    for rows, r in out.items():
        m = r["mirror"]
        cat = lambda key: (f" {(r['catalog'][key] if key == 'big' else statistics.median(r['catalog'][key])):.2f} |"
                           if args.catalog else "")
        print(f"| a WriteBatch of {rows:,} rows (initial load, one append) | {r['off']['big']:.2f} | {r['on']['big']:.2f} |"
              f"{cat('big')} {m['big']:.3f} |")
        print(f"| a WriteBatch of 100 rows into {rows:,} (median of {args.small}) | {statistics.median(r['off']['small']):.2f} | "
              f"{statistics.median(r['on']['small']):.2f} |{cat('small')} {statistics.median(m['small']):.3f} |")
    print(json.dumps(out))
    return 0
