"""`delta-destination-maintain` (also `fivetran-delta-destination maintain`): table upkeep on demand
(cron, a scheduler, by hand).

Compacts, purges deletion vectors and vacuums one table, a schema's tables or every table
of a local warehouse, on the engine named (the Apache Spark engine does all of it; Sail
0.7.2 can do none of it and says so). One line per table on stdout; exit code 0 when
every step ran, 2 when the engine could not do some of them, 1 on an error.
"""
from __future__ import annotations

import argparse
import logging
import sys

from .. import logs
from ..core.upkeep import DEFAULT_RETENTION_HOURS, UpkeepOptions
from ..errors import DestinationError
from ..settings import add_flags, from_flags, runtime_from_values
from .process_exit import exit_now
from .runtime import open_core


def parse_args(argv):
    p = argparse.ArgumentParser(prog="delta-destination-maintain", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(p)  # the settings schema's flags, as the server has them (auto runs upkeep on Spark)
    p.add_argument("--schema", default=None)
    p.add_argument("--table", default=None, help="needs --schema")
    p.add_argument("--vacuum-retention-hours", "--retention-hours", dest="retention_hours", type=int,
                   default=DEFAULT_RETENTION_HOURS,
                   help=f"VACUUM keeps files removed less than this long ago (default and minimum {DEFAULT_RETENTION_HOURS})")
    args = p.parse_args(argv)
    if args.table and not args.schema:
        p.error("--table needs --schema")
    return args


def main(argv=None) -> int:
    """The console script: a one-off command that ends like the doors (process_exit.py)."""
    code = run(argv)
    exit_now(code)
    return code


def run(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logs.install(handler)
    runtime = open_core("maintain", runtime_from_values({}))
    core = runtime.core
    try:
        settings = from_flags(args)
        options = UpkeepOptions(retention_hours=args.retention_hours)
        code = 0
        for ref in core.upkeep.tables(settings, args.schema, args.table):
            report = core.upkeep.run(settings, ref, options)
            print(report.summary(), flush=True)
            if report.unsupported:
                code = 2
        return code
    except DestinationError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    finally:
        runtime.close()
