"""Apache Iceberg's REST catalog server on loopback for the tests and manual runs: the
`RESTCatalogServer` of Iceberg 1.10.0's test fixtures (what the apache/iceberg-rest-fixture image
runs: Jetty serving the REST catalog API in front of a JdbcCatalog), from `.iceberg-rest-jars/`
(`make iceberg-rest-jars`, part of `make install`; jvm/iceberg-rest/pom.xml). Needs Java 17+.

What a start guarantees (checked by tests/engines/test_iceberg_rest_catalog.py):
- It listens on a port picked free at start and answers `GET /v1/config` before `start()` returns.
  (Jetty binds all interfaces: RESTCatalogServer has no host setting; clients use 127.0.0.1.)
- Its catalog is a SQLite database in a temporary directory private to this user, removed by `stop()`,
  so each start is an empty catalog; tables are read through Hadoop's local file system (HadoopFileIO),
  so the metadata files a registered table names must be local paths.
- The server dies with the thread that started it (delta_destination/engines/launcher.py).

The server is configured only through `CATALOG_*` environment variables (RCKUtils.environmentCatalogConfig:
the prefix dropped, `__` -> `-`, `_` -> `.`, lower case): CATALOG_URI, CATALOG_WAREHOUSE and
CATALOG_REST_PORT (`rest.port`). Variables of that prefix from the caller's environment are not passed on.
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

from tools.emulator import EmulatorProcess, free_port
from tools.local_cluster.config import java_path

ROOT = Path(__file__).resolve().parents[1]
JARS = ROOT / ".iceberg-rest-jars"
MAIN_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"


class IcebergRestServerError(RuntimeError):
    """The server's jars or Java are missing, or it did not start or answer in time."""


def server_classpath() -> str:
    """The jars `make iceberg-rest-jars` fetched (or $ICEBERG_REST_JARS)."""
    directory = Path(os.environ.get("ICEBERG_REST_JARS") or JARS)
    if not (directory / ".fetched").exists() or not any(directory.glob("iceberg-open-api-*-test-fixtures.jar")):
        raise IcebergRestServerError(f"Iceberg's REST catalog server jars are missing from {directory}: "
                                     "run `make iceberg-rest-jars` (needs Maven and Java 17+)")
    return f"{directory}/*"


def java_binary() -> str:
    found = java_path()
    if not found:
        raise IcebergRestServerError("no `java` on PATH (Java 17+ runs Iceberg's REST catalog server)")
    return found


class IcebergRestServer(EmulatorProcess):
    """One REST catalog over a fresh SQLite JdbcCatalog.

    with IcebergRestServer() as rest:
        rest.url     -> "http://127.0.0.1:<port>" (the destination's iceberg_catalog_uri)
    """

    title = "Iceberg's REST catalog server"
    log_name = "iceberg-rest.log"
    error = IcebergRestServerError

    def __init__(self, *, startup_timeout: float = 90.0, stop_grace: float = 5.0):
        super().__init__(startup_timeout=startup_timeout, stop_grace=stop_grace)
        self.url = ""

    def start(self) -> "IcebergRestServer":
        classpath, java = server_classpath(), java_binary()
        self._private_dir("iceberg-rest-")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
        env.update({"CATALOG_URI": f"jdbc:sqlite:{self.data_dir / 'catalog.db'}",
                    "CATALOG_WAREHOUSE": str(self.data_dir / "warehouse"),
                    "CATALOG_REST_PORT": str(port)})
        self._spawn([java, "-Xmx256m", "-cp", classpath, MAIN_CLASS], env)
        try:
            self._wait_until(self.config, "answer GET /v1/config", (OSError,))
        except BaseException:
            self.stop()
            raise
        return self

    def config(self) -> dict:
        """The server's answer to `GET /v1/config` (OSError while it is not up)."""
        with urllib.request.urlopen(f"{self.url}/v1/config", timeout=5) as response:
            return json.load(response)


if __name__ == "__main__":
    import signal
    import sys

    with IcebergRestServer() as rest:
        print(f"iceberg_catalog_uri={rest.url}", flush=True)
        try:
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        except KeyboardInterrupt:
            pass
    sys.exit(0)
