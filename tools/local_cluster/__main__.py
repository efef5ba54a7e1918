"""`python -m tools.local_cluster start|stop|status [--state-dir DIR]`: what `make
cluster`, `make cluster-stop` and `make cluster-status` run (`serve` is the supervisor `start` leaves
behind)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Iterable, Optional

from . import __doc__ as PACKAGE_DOC
from .config import DEFAULT_STATE_DIR, ClusterOptions
from .supervisor import cmd_start, cmd_status, cmd_stop, serve


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.local_cluster",
                                     description=PACKAGE_DOC.split("\n")[0])
    parser.add_argument("command", choices=["start", "stop", "status", "serve"])
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument("--storage", choices=["auto", "s3", "local"], default=os.environ.get("CLUSTER_STORAGE", "auto"))
    args = parser.parse_args(list(argv) if argv is not None else None)
    state_dir = args.state_dir.resolve()
    if args.command == "serve":
        return serve(state_dir, ClusterOptions(storage=args.storage))
    if args.command == "start":
        return cmd_start(state_dir, ClusterOptions(storage=args.storage))
    if args.command == "stop":
        return cmd_stop(state_dir)
    return cmd_status(state_dir)


if __name__ == "__main__":
    sys.exit(main())
