"""The tester client on the command line, against a running destination:

    .venv/bin/python -m testkit.tester --port 50052 --warehouse ./warehouse \
        --input testdata/fivetran-tester-inputs/input.json [--schema tester] \
        [--plain-text] [--compression zstd|gzip|off] [--live-only] [--migrations]
"""
from __future__ import annotations

import argparse

import grpc

from delta_destination.doors.fivetran._proto import destination_sdk_pb2_grpc
from delta_destination.doors.fivetran.batch_files import Compression
from .runner import run_input_file
from .state import RunResult


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Drive the destination like Fivetran's destination tester.")
    ap.add_argument("--port", type=int, default=50052)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--input", required=True, help="tester input JSON file")
    ap.add_argument("--schema", default="tester")
    ap.add_argument("--warehouse", default="./warehouse", help="the server's warehouse directory (read back)")
    ap.add_argument("--plain-text", action="store_true", help="do not encrypt the batch files")
    ap.add_argument("--compression", choices=["zstd", "gzip", "off"], default="zstd")
    ap.add_argument("--live-only", action="store_true", help="treat history_mode tables as live tables")
    ap.add_argument("--migrations", action="store_true", help="run schema_migration steps")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def print_result(result: RunResult) -> int:
    """The result as text; the exit status (0: the destination matches the reference model)."""
    for n in result.notes:
        print(f"note: {n}")
    for name, t in result.tables.items():
        print(f"table {name}: {len(t['rows'])} rows")
    if result.ok:
        print("RESULT: OK, the destination matches the reference model")
        return 0
    print(f"RESULT: MISMATCH ({len(result.problems)} problems)")
    for p in result.problems:
        print(f"  - {p}")
    return 1


def main(argv=None) -> int:
    args = parse_args(argv)
    channel = grpc.insecure_channel(f"{args.host}:{args.port}")
    stub = destination_sdk_pb2_grpc.DestinationConnectorStub(channel)
    result = run_input_file(stub, args.warehouse, args.input, args.schema, live_only=args.live_only,
                            compression=Compression[args.compression.upper()], plain_text=args.plain_text,
                            seed=args.seed, run_migrations=args.migrations, log=print,
                            storage_options=environment_storage_options(args.warehouse))
    return print_result(result)


def environment_storage_options(warehouse: str):
    """How delta-rs reads back an object-store warehouse, from this process's standard variables as
    the destination reads them (object_store itself knows no STORAGE_EMULATOR_HOST, for one)."""
    import os

    from delta_destination.settings import from_environment, from_values
    from delta_destination.storage import delta_rs_options, is_url

    if not is_url(warehouse):
        return None
    settings = from_values({"warehouse": warehouse, **from_environment(os.environ)})
    return delta_rs_options(settings.warehouse, settings.storage) or None
