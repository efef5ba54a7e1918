"""The Sail engine as a process of its own, run by the destination's engine supervisor.

    python -m delta_destination.engines.sail_engine --parent PID     # a normal installation
    main sail-engine --parent PID                                     # the single-file binary

Why a process of its own: Sail 0.7.2 keeps memory for every statement it runs and never gives
it back (docs/engine-memory.md: ~57 KiB per SQL statement, ~20 KiB per DataFrame query, more
per MERGE; no setting bounds it). Inside the destination that grew the server by ~0.7 MiB per
request without end, and a native crash of the engine took the whole server down. As a child,
its supervisor (supervisor.py) replaces it between requests when it grows past a bound, and a
crash fails only the requests it was serving.

The protocol with the supervisor is small on purpose (it must work from the binary too, which
starts itself again with the `sail-engine` sub-command): the FIRST line on stdout is the port
the engine listens on (127.0.0.1 only, chosen by the kernel: no race for a free port); after
it stdout is /dev/null, so nothing the engine prints can fill a pipe nobody reads. The
process ends on SIGTERM or SIGINT, and is SIGKILLed by the kernel when the supervisor's
thread that started it ends (PR_SET_PDEATHSIG, asked for before anything else), also on
kill -9 of the destination.

Only the standard library and pysail are imported here: the child starts in about a second.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from .launcher import PARENT_GONE, die_with_parent

# The engine must never spill query data (plaintext customer rows) to temporary files; its own
# log lines go to stderr, which the supervisor discards (they can quote values): warnings only.
ENGINE_ENV = {"SAIL_RUNTIME__TEMPORARY_FILES__MAX_SIZE": "0", "RUST_LOG": "warn"}
# Sail's allocator (mimalloc) commits its arenas eagerly and then never gives freed pages back:
# a process fed ~5-record MERGEs grew ~5 MiB per request (170 -> 1,000 MiB of resident memory in
# 170 requests, all of it anonymous memory, none lazily freed), which the supervisor saw as
# growth and replaced it for. With arenas committed on demand and freed pages returned at once it
# held 250 MiB after 150 requests and 361 MiB after 600 (docs/conduit.md, "Memory of the embedded
# engine"). It costs CPU on big statements: the 1M-row bench's 100k upsert, partial update and
# delete took 9.6 / 22.6 / 18.2 CPU seconds with it and 5.7 / 15.6 / 10.0 without (docs/benchmarks.md).
# So only engines whose bound is derived from their own size (a door of small batches: Conduit,
# engines/pool.py) get it.
RETURNING_ALLOCATOR_ENV = {"MIMALLOC_ARENA_EAGER_COMMIT": "0", "MIMALLOC_PURGE_DELAY": "0",
                           "MIMALLOC_PURGE_DECOMMITS": "1"}
SUB_COMMAND = "sail-engine"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=SUB_COMMAND, description="The Sail engine process of a destination.")
    p.add_argument("--parent", type=int, required=True, help="the supervising process (the engine dies with it)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    die_with_parent()
    # The parent may have died between our start and the prctl: then no signal would come.
    if os.getppid() != args.parent:
        return PARENT_GONE
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: stop.set())

    from pysail.spark import SparkConnectServer

    server = SparkConnectServer(ip="127.0.0.1", port=0)
    server.start(background=True)
    _host, port = server.listening_address
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    while not stop.wait(0.5):
        pass
    server.stop()
    # No interpreter teardown: the engine's native threads must not hold the exit.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
