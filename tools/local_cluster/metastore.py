"""LocalMetastore: the cluster's Hive standalone metastore 4.0.1 alone (no Spark), for the tests of
what talks to a metastore over Thrift itself (the Iceberg Hive catalog, core/iceberg/hive_catalog.py).

The same JVM, settings and Derby database as LocalCluster's metastore (config.metastore_site,
config.metastore_command), started in this process in its own state directory, on a port picked
free, and stopped with its process group; it dies with the thread that starts it (the launcher's
PR_SET_PDEATHSIG). With `s3` (a tools.s3_server.S3Server) its Hadoop side reaches that server through
S3A (the jars of .spark-jars, the keys through its environment), as the cluster's does.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional

from delta_destination.engines import launcher
from delta_destination.engines.spark_process import accepts_connections

from .config import (METASTORE_JARS, METASTORE_LOG4J, ClusterError, jars_in, metastore_command, metastore_site,
                     s3a_jars, s3a_settings, to_s3a)
from .processes import stop_group


class LocalMetastore:
    """`with LocalMetastore(tmp / "ms", warehouse) as ms: ms.uri` (thrift://127.0.0.1:<port>)."""

    def __init__(self, state_dir: Path, warehouse: str, *, s3=None, memory: str = "384m",
                 startup_timeout: float = 180.0, stop_grace: float = 10.0):
        self.state_dir = Path(state_dir).resolve()
        self.warehouse = warehouse
        self.s3 = s3
        self.memory = memory
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.port: Optional[int] = None
        self.proc: Optional[subprocess.Popen] = None

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.state_dir / "metastore.log"

    def start(self) -> "LocalMetastore":
        jars_in(METASTORE_JARS, "Hive metastore", "cluster-jars")
        (self.state_dir / "conf").mkdir(parents=True, mode=0o700, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        hadoop_s3 = s3a_settings(self.s3.endpoint_url, self.s3.region) if self.s3 is not None else None
        (self.state_dir / "conf" / "metastore-site.xml").write_text(
            metastore_site(self.port, self.state_dir / "db", to_s3a(self.warehouse), hadoop_s3))
        (self.state_dir / "conf" / "metastore-log4j2.properties").write_text(METASTORE_LOG4J)
        cmd = metastore_command(self.state_dir, self.memory, s3a_jars() if self.s3 is not None else [])
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "CLASSPATH"}
        if self.s3 is not None:
            env.update(self.s3.env())   # S3A's keys: the environment, never a file or the command line
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(launcher.command(cmd), cwd=self.state_dir, env=env, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while not accepts_connections(self.port):
            if self.proc.poll() is not None:
                raise ClusterError(f"the metastore exited with code {self.proc.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise ClusterError(f"the metastore did not listen within {self.startup_timeout:.0f}s: {self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc.pid, self.stop_grace, proc=self.proc)
            self.proc = None

    def __enter__(self) -> "LocalMetastore":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
