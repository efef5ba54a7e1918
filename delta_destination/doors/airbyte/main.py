"""The Airbyte door's process: `airbyte-delta-destination spec | check --config F | write --config F --catalog F`.

`answer_error` is the ONE place where typed errors become Airbyte TRACE errors:
config_error for what the user must fix (config, catalog, warehouse permissions),
transient_error for an engine that could not be reached, system_error for the rest
(bad input lines, rejected records, engine failures). A failed `write` exits 1.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from ... import errors, logs, metrics
from ..runtime import open_core
from ..process_exit import exit_now
from .stream_plans import is_staging_table, plan_catalog
from .config import load_json_file, parse_config, spec
from .errors import CatalogInvalid, ConfigInvalid
from .protocol import LogHandler, Output, connection_status, read_lines, spec_message, trace_error
from .sync import Sync

log = logs.get("delta_destination.doors.airbyte.main")  # not __name__: this module also runs as __main__

_FAILURE_TYPES = (
    (ConfigInvalid, "config_error"),
    (CatalogInvalid, "config_error"),
    (errors.UnsafeName, "config_error"),
    (errors.CustomerActionRequired, "config_error"),
    (errors.MemoryBudgetExceeded, "config_error"),  # retrying cannot help; the engine setting can
    (errors.EngineUnavailable, "transient_error"),
)


def failure_type(exc: BaseException) -> str:
    for cls, kind in _FAILURE_TYPES:
        if isinstance(exc, cls):
            return kind
    return "system_error"


def answer_error(out: Output, exc: BaseException) -> int:
    if isinstance(exc, errors.DestinationError):
        message = exc.message
        internal = f"{type(exc).__name__}: {exc.message}"
    else:  # unexpected: its text may quote a value, so only the class travels
        message = f"the destination failed unexpectedly ({type(exc).__name__})"
        internal = type(exc).__name__
    log.error(message)
    out.write(trace_error(message, failure_type(exc), internal, exc))
    return 1


def parse_args(argv):
    p = argparse.ArgumentParser(prog="airbyte-delta-destination", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("spec")
    c = sub.add_parser("check")
    c.add_argument("--config", required=True)
    w = sub.add_parser("write")
    w.add_argument("--config", required=True)
    w.add_argument("--catalog", required=True)
    return p.parse_args(argv)


def check(out: Output, config_path: str) -> int:
    """Bad config or an unusable warehouse/engine is FAILED with a reason (exit 0)."""
    try:
        config = parse_config(load_json_file(config_path, "config"))
        runtime = open_core("airbyte", config.runtime, working_table=is_staging_table)
        try:
            failure = runtime.core.probe(config.settings)
        finally:
            runtime.close()
    except errors.DestinationError as exc:
        failure = exc.message
    out.write(connection_status(failure is None, failure))
    return 0


def write(out: Output, config_path: str, catalog_path: str, stdin) -> int:
    config = parse_config(load_json_file(config_path, "config"))
    catalog = load_json_file(catalog_path, "catalog")
    if not isinstance(catalog, dict):
        raise CatalogInvalid("the catalog is not a JSON object")
    plans = plan_catalog(catalog, config.default_schema)
    log.info(f"write: {len(plans)} streams, engine {config.settings.engine_label}")
    runtime = open_core("airbyte", config.runtime, working_table=is_staging_table)
    try:
        sync = Sync(runtime.core, config, plans, out.write)
        sync.run(read_lines(stdin, max(config.flush_interval_seconds, 0.05), sync.idle))
    finally:
        runtime.close()   # a short-lived process: queued lineage events are sent before it ends
    return 0


def main(argv: Optional[list] = None) -> int:
    """The console script: runs one command, then ends the process without the interpreter's
    exit hooks (process_exit.py: a PySpark client of an engine that died would keep a finished
    `write` alive for minutes, and the platform waits for the process)."""
    code = run(argv)
    exit_now(code)
    return code


def run(argv: Optional[list] = None) -> int:
    out = Output.take_stdout()
    logs.install(LogHandler(out))
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "spec":
            out.write(spec_message(spec()))
            code = 0
        elif args.command == "check":
            code = check(out, args.config)
        else:
            code = write(out, args.config, args.catalog, sys.stdin.buffer)
        metrics.request_finished("airbyte", args.command, "success")
        return code
    except BaseException as exc:  # noqa: BLE001 - every failure is answered as a TRACE
        if isinstance(exc, SystemExit):
            raise
        metrics.request_finished("airbyte", args.command, failure_type(exc))
        return answer_error(out, exc)


if __name__ == "__main__":
    sys.exit(main())
