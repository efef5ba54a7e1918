"""The embedded engine: Sail's Spark Connect server inside this process (no JVM)."""
from __future__ import annotations

import os

from .. import logs

log = logs.get(__name__)

# The embedded engine must never spill query data (plaintext customer rows) to temporary
# files: refuse spilling outright. Operators can override through the environment.
# Its own log lines go to stderr (stdout belongs to the door); keep them to warnings.
EMBEDDED_ENV = {"SAIL_RUNTIME__TEMPORARY_FILES__MAX_SIZE": "0", "RUST_LOG": "warn"}


class EmbeddedSail:
    def __init__(self):
        from pysail.spark import SparkConnectServer

        for k, v in EMBEDDED_ENV.items():
            os.environ.setdefault(k, v)
        self._server = SparkConnectServer(ip="127.0.0.1", port=0)
        self._server.start(background=True)
        _host, port = self._server.listening_address
        self.url = f"sc://127.0.0.1:{port}"
        log.info("embedded Sail Spark Connect engine started")

    def stop(self) -> None:
        self._server.stop()
