"""The path of one Fivetran WriteBatch through the code, measured: which of the package's modules it
runs, how often it enters `engines/` from outside, how often `engines/` calls back into `core/`, and
how often the Delta log is read (and from where).

    python -m bench.structure.write_path [--engine auto|sail|spark] [--rows 2000]

A real gRPC server in this process (the Fivetran door's servicer on a core opened as the door opens
it), a table created and loaded through it, then ONE traced WriteBatch of 50 updates of stored keys
and 50 new keys (encrypted, zstd CSV): the keyed MERGE path. Every Python call made while that
request runs is seen (`threading.setprofile`); a call counts for the nearest frame of the package on
each side. Reads of the Delta log are counted where they happen: delta-rs opening the table, a
listing of `_delta_log/`, a read of a file in it. docs/architecture.md quotes its output.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent import futures
from pathlib import Path

PACKAGE = "delta_destination"


# Decisions a request should make once: the warehouse check, auto's engine before and after the
# table's size, and the snapshot of the table.
AFTER_COMMIT_SECONDS = 3.0
DECISIONS = ("check_warehouse_root", "base_choice", "merge_choice", "read_snapshot")


def module_of(filename: str) -> str | None:
    """`delta_destination/core/writer.py` -> `core/writer.py` (None outside the package, and for
    generated protocol code)."""
    parts = Path(filename).parts
    if PACKAGE not in parts:
        return None
    rel = "/".join(parts[len(parts) - parts[::-1].index(PACKAGE):])
    if "/_proto/" in f"/{rel}" or rel.endswith("_pb2.py") or rel.endswith("_pb2_grpc.py"):
        return None
    return rel


def layer(module: str) -> str:
    return module.split("/", 1)[0] if "/" in module else "(base)"


class PathTrace:
    """The profile function: what one request runs, counted while `on`."""

    def __init__(self):
        self.on = False
        self.modules: Counter = Counter()
        self.entries: Counter = Counter()      # (caller, callee) into engines/ from outside it
        self.callbacks: Counter = Counter()    # (caller in engines/, callee in core/)
        self.log_reads: Counter = Counter()    # (kind, issuing module)
        self.decisions: Counter = Counter()    # how often each decision of DECISIONS is made

    def __call__(self, frame, event, arg):
        if not self.on or event != "call":
            return
        code = frame.f_code
        callee = module_of(code.co_filename)
        if callee is None:
            self._log_read(frame)
            return
        self.modules[callee] += 1
        if code.co_name in DECISIONS:
            self.decisions[code.co_name] += 1
        if layer(callee) == "storage" and code.co_name in ("list", "read_bytes") and \
                "_delta_log" in str(frame.f_locals.get("location", "")):
            issuer = nearest(frame.f_back, outside="storage", outside_module="core/delta_log.py")
            kind = "a listing of _delta_log/" if code.co_name == "list" else "a read of a commit file"
            self.log_reads[(kind, ":".join(issuer) if issuer else "?")] += 1
        caller = nearest(frame.f_back)
        if caller is None:
            return
        c_mod, c_name = caller
        here = (f"{c_mod}:{c_name}", f"{callee}:{code.co_name}")
        if layer(callee) == "engines" and layer(c_mod) != "engines":
            self.entries[here] += 1
        if layer(callee) == "core" and layer(c_mod) == "engines":
            self.callbacks[here] += 1

    def _log_read(self, frame):
        code = frame.f_code
        name = code.co_name
        where = code.co_filename
        if name == "__init__" and where.endswith(os.path.join("deltalake", "table.py")) and \
                type(frame.f_locals.get("self")).__name__ == "DeltaTable":
            issuer = nearest(frame.f_back, outside_module="core/delta_log.py")
            self.log_reads[("delta-rs opens the table", ":".join(issuer) if issuer else "?")] += 1


def nearest(frame, outside: str | None = None, outside_module: str | None = None):
    """The nearest frame of the package (`outside`: of a layer other than that one; `outside_module`:
    of another module than that one: the log reader's callers are who wants the log)."""
    while frame is not None:
        mod = module_of(frame.f_code.co_filename)
        if mod is not None and (outside is None or layer(mod) != outside) and mod != outside_module and \
                mod != "warehouse.py":
            return mod, frame.f_code.co_name
        frame = frame.f_back
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="auto", choices=("auto", "sail", "spark"))
    ap.add_argument("--rows", type=int, default=2000)
    args = ap.parse_args(argv)

    trace = PathTrace()
    threading.setprofile(trace)     # threads started from here on (the server's workers, the engines')
    sys.setprofile(trace)

    import grpc
    from delta_destination.core.model import DataType
    from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
    from delta_destination.doors.fivetran._proto import destination_sdk_pb2_grpc as pb_grpc
    from delta_destination.doors.fivetran.batch_files import FileFormat
    from delta_destination.doors.fivetran.servicer import DestinationServicer
    from delta_destination.doors.runtime import open_core
    from delta_destination.settings import Runtime, Settings
    from testkit.fivetran_requests import batch_file, col, table, write_request

    work = Path(tempfile.mkdtemp(prefix="write-path-"))
    settings = Settings.create(str(work / "wh"), engine=args.engine)
    runtime = open_core("fivetran", Runtime())
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_DestinationConnectorServicer_to_server(DestinationServicer(settings, runtime.core, FileFormat.CSV), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        stub = pb_grpc.DestinationConnectorStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        orders = table("orders", col("id", DataType.LONG, pk=True), col("name", DataType.STRING),
                       col("amount", DataType.DOUBLE))
        stub.CreateTable(pb.CreateTableRequest(schema_name="s", table=orders))
        load = [{"id": i, "name": f"n{i}", "amount": float(i)} for i in range(args.rows)]
        stub.WriteBatch(write_request("s", orders, replace=[batch_file(work, orders, load)]))
        step = max(1, args.rows // 50)
        rows = [{"id": i, "name": "updated", "amount": 1.0} for i in range(0, args.rows, step)][:50]
        rows += [{"id": args.rows + i, "name": "new", "amount": 2.0} for i in range(50)]
        request = write_request("s", orders, replace=[batch_file(work, orders, rows)])
        trace.on = True
        stub.WriteBatch(request)
        time.sleep(AFTER_COMMIT_SECONDS)   # what runs after the commit (small-file compaction looks at the table)
        trace.on = False
    finally:
        server.stop(0)
        runtime.close()
        sys.setprofile(None)
        threading.setprofile(None)

    print(f"one WriteBatch (engine {args.engine}, 50 updates + 50 new keys into {args.rows} rows)")
    print(f"modules of the package it runs: {len(trace.modules)}")
    for mod in sorted(trace.modules):
        print(f"  {mod}")
    print(f"entries into engines/ from outside it: {sum(trace.entries.values())} calls, {len(trace.entries)} call sites")
    for (a, b), n in sorted(trace.entries.items()):
        print(f"  {a} -> {b} ({n})")
    print(f"calls from engines/ back into core/: {sum(trace.callbacks.values())} calls, {len(trace.callbacks)} call sites")
    for (a, b), n in sorted(trace.callbacks.items()):
        print(f"  {a} -> {b} ({n})")
    print("decisions made: " + ", ".join(f"{name} {trace.decisions[name]}x" for name in DECISIONS))
    print(f"reads of the Delta log: {sum(trace.log_reads.values())}")
    for (kind, issuer), n in sorted(trace.log_reads.items()):
        print(f"  {kind}, from {issuer}: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
