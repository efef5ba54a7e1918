"""One Apache Spark engine for a whole test session, shared by every server and door process
that only needs *an* engine (not one of its own).

Why: a local Spark JVM takes 10-20 s to start on a 2-core machine, and each server or Airbyte
`write` started with `--engine spark` starts its own. Tests that are about the destination's
Delta work, not about its JVM, reach this one engine with `--spark-remote` (servers) or
`spark_remote` (door configurations) instead. The engine is the destination's own local engine
(`LocalSparkServer` with its default configuration), started lazily by the first test that
needs it and stopped at the end of the session. Tests about the local JVM's lifecycle (kill -9,
scratch folders, restarts, `make run ENGINE=spark`) keep a JVM of their own.

The test targets run test JVMs with C1 only (JAVA_TOOL_OPTIONS in the Makefile): most live for
seconds to minutes, where C2's compilations cost more CPU than they save. This one serves the whole
session's Spark tests, so it asks for C2 back (options on its command line win over
JAVA_TOOL_OPTIONS); without C2 the shared engine was 2-3x slower (2026-11-27 rehearsal).

`DELTA_TEST_SPARK_REMOTE=sc://host:port` points the shared engine at an existing Spark Connect
+ Delta endpoint instead (it must see the tests' warehouse paths); then no JVM is started.
"""
from __future__ import annotations

import os
import threading
from typing import Optional

REMOTE_ENV = "DELTA_TEST_SPARK_REMOTE"
# The JVM's default JIT (tiered up to C2), whatever JAVA_TOOL_OPTIONS says.
LONG_LIVED_JVM_OPTIONS = "-XX:TieredStopAtLevel=4"


class SharedSpark:
    """The session's Spark engine: started on first use of `url`, stopped by `stop()`."""

    def __init__(self):
        self._lock = threading.Lock()
        self._server = None  # LocalSparkServer, once started
        self._url: Optional[str] = os.environ.get(REMOTE_ENV) or None

    @property
    def url(self) -> str:
        with self._lock:
            if self._url is None:
                from delta_destination.engines.spark_process import LocalSparkServer, SparkProcessOptions

                self._server = LocalSparkServer(SparkProcessOptions(java_options=LONG_LIVED_JVM_OPTIONS))
                self._url = self._server.url
            return self._url

    @property
    def started(self) -> bool:
        return self._url is not None

    def stop(self) -> None:
        with self._lock:
            server, self._server = self._server, None
            if server is not None:
                server.stop()
                self._url = os.environ.get(REMOTE_ENV) or None

