"""How a door's process ends once its own cleanup has run.

Every PySpark Spark Connect client that was never closed registers an interpreter exit hook
(`SparkConnectClient._on_exit`) that sends RPCs to its engine with the client's retry policy:
minutes against an engine that died (a killed JVM, a remote server gone, a warm-up cut short).
A door that returned normally then hung after its last log line (seen with the Fivetran door
after "destination stopped"). The doors stop their servers, engines and lineage themselves,
flush, and end here without running those hooks."""
from __future__ import annotations

import logging
import os
import sys


def exit_now(code: int) -> None:
    """Flush the logs and the standard streams, then end the process with `code`."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach it
            pass
    os._exit(code)
