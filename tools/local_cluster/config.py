"""The local cluster's configuration: its sizes, where its jars are, and the files and settings
each of its processes is given (pure functions; nothing here starts a process)."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from xml.sax.saxutils import escape

from delta_destination.engines.spark_process import (
    HIVE_CLIENT_JARS_DIR,
    PROJECT_ROOT,
    SparkProcessOptions,
    catalog_conf,
    server_conf,
)

ROOT = PROJECT_ROOT
DEFAULT_STATE_DIR = ROOT / ".cluster"
SPARK_JARS = ROOT / ".spark-jars"
METASTORE_JARS = ROOT / ".metastore-jars"
HIVE_CLIENT_JARS = HIVE_CLIENT_JARS_DIR
METASTORE_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
BUCKET = "warehouse"
WAREHOUSE_PREFIX = "cluster"
APP_NAME = "delta-destination-cluster"
SUPERVISOR_LOG = "supervisor.log"
SECRET_KEYS = ("AWS_SECRET_ACCESS_KEY",)


class ClusterError(RuntimeError):
    """A part of the cluster did not start, or a cluster is already running."""


@dataclass(frozen=True)
class ClusterOptions:
    """Sizes on a 2-core machine: the whole cluster stays under ~5 GB of resident memory."""

    workers: int = 2
    worker_cores: int = 1
    # What a worker may hand to executors; each gets one executor of `executor_memory`.
    worker_memory: str = "1g"
    executor_memory: str = "768m"
    # Heap of the master and worker daemons themselves (SPARK_DAEMON_MEMORY).
    daemon_memory: str = "256m"
    driver_memory: str = "1g"
    metastore_memory: str = "512m"
    # "s3": SeaweedFS (fails when it or the S3A jars are missing); "local": a shared directory;
    # "auto": S3 when available.
    storage: str = "auto"
    startup_timeout: float = 420.0
    stop_grace: float = 15.0
    # Tie every process to the thread that starts it (PR_SET_PDEATHSIG): a test run that dies
    # takes its cluster with it. The supervisor of `make cluster` ties them to itself.
    die_with_starter: bool = True


def java_path() -> Optional[str]:
    """The `java` of $JAVA_HOME, else the one on PATH (None: neither); the tools that start a JVM
    (this cluster, tools/iceberg_rest_server.py) each say what a missing one stops."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def java_binary() -> str:
    found = java_path()
    if not found:
        raise ClusterError("no `java` on PATH (Java 17+ runs Spark and the metastore)")
    return found


def jars_in(directory: Path, what: str, make_target: str) -> list[Path]:
    jars = sorted(directory.glob("*.jar")) if directory.is_dir() else []
    if not jars:
        raise ClusterError(f"the {what} jars are missing from {directory}: run `make {make_target}`")
    return jars


def s3a_jars() -> list[Path]:
    """S3A and the AWS SDK modules it needs, from .spark-jars (jvm/pom.xml): every jar there but Delta's."""
    if not SPARK_JARS.is_dir() or not any(SPARK_JARS.glob("hadoop-aws-*.jar")):
        return []
    return sorted(j for j in SPARK_JARS.glob("*.jar") if not j.name.startswith("delta-"))


def to_s3a(url: str) -> str:
    """Hadoop's S3 client is S3A: `s3://b/k` -> `s3a://b/k`."""
    return "s3a://" + url[len("s3://"):] if url.startswith("s3://") else url


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (0600 from its creation, no window)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def metastore_site(port: int, db_dir: Path, warehouse: str, s3: Optional[dict[str, str]]) -> str:
    """metastore-site.xml (pure). No secret: S3A takes the keys from the process environment."""
    props = {
        "metastore.thrift.port": str(port),
        "metastore.thrift.bind.host": "127.0.0.1",
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={db_dir};create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        # A fresh Derby database gets its schema from DataNucleus at the first start; the
        # recorded schema version is then not checked (schematool would be a separate JVM run).
        "datanucleus.schema.autoCreateAll": "true",
        "metastore.schema.verification": "false",
        "metastore.warehouse.dir": warehouse,
        "metastore.warehouse.external.dir": warehouse,
        # Hive 4's default transformer rewrites what clients without "capabilities" (Spark) see
        # and create: a plain catalog stores what it is given.
        "metastore.metadata.transformer.class": " ",
        # Async logging needs the LMAX disruptor, which the metastore's Maven pom does not bring.
        "metastore.async.log.enabled": "false",
        # No compaction, statistics or housekeeping work for tables Hive does not manage.
        "metastore.compactor.initiator.on": "false",
        "metastore.compactor.cleaner.on": "false",
        "metastore.stats.auto.gather": "false",
        "metastore.metrics.enabled": "false",
        "metastore.event.db.notification.api.auth": "false",
    }
    if s3:
        props.update(s3)
    body = "\n".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>"
                     for k, v in props.items())
    return f"<?xml version=\"1.0\"?>\n<configuration>\n{body}\n</configuration>\n"


def metastore_command(ms_dir: Path, memory: str, extra_jars: list[Path]) -> list[str]:
    """The metastore's JVM command (pure): its conf directory (`ms_dir/conf`, metastore-site.xml and
    the log4j2 file) first on the class path, then its jars; Derby and the temporary files under
    `ms_dir`. `extra_jars`: S3A's when the warehouse is on S3."""
    classpath = ":".join([str(ms_dir / "conf"), f"{METASTORE_JARS}/*", *map(str, extra_jars)])
    return [java_binary(), f"-Xmx{memory}", "-XX:+UseSerialGC", f"-Djava.io.tmpdir={ms_dir}",
            f"-Dderby.system.home={ms_dir}", "-cp", classpath, METASTORE_CLASS]


METASTORE_LOG4J = """\
status = WARN
name = metastore
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %5p [%t] %c{2}: %m%n
rootLogger.level = INFO
rootLogger.appenderRef.console.ref = console
logger.datanucleus.name = DataNucleus
logger.datanucleus.level = WARN
"""


def s3a_settings(endpoint: str, region: str) -> dict[str, str]:
    """Hadoop settings for S3A against an S3-compatible server on an IP (path-style, plain HTTP).
    The keys are not here: S3A's default chain reads AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY
    from the environment of each JVM (driver, executors via their worker, metastore)."""
    return {
        "fs.s3a.endpoint": endpoint,
        "fs.s3a.endpoint.region": region,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
    }


def connect_conf(*, grpc_port: int, ui_port: int, scratch: Path, warehouse_for_spark: str, metastore_port: int,
                 options: ClusterOptions, s3: Optional[dict[str, str]]) -> dict[str, str]:
    """The Connect server's Spark settings (pure): the local engine's own (Delta, UTC, ANSI,
    INT64 microsecond timestamps, no auto compaction) plus the cluster's."""
    base = server_conf(grpc_port, scratch, SparkProcessOptions(cores=options.workers * options.worker_cores))
    conf = {
        **base,
        "spark.ui.enabled": "true",
        "spark.ui.port": str(ui_port),
        "spark.ui.killEnabled": "false",
        "spark.executor.memory": options.executor_memory,
        "spark.executor.cores": str(options.worker_cores),
        "spark.cores.max": str(options.workers * options.worker_cores),
        "spark.executor.extraJavaOptions": f"-Djava.io.tmpdir={scratch / 'executor-tmp'}",
        # Executors start with the application (standalone allocates them at registration), and
        # stay: dynamic allocation would hand work back to one worker.
        "spark.dynamicAllocation.enabled": "false",
        "spark.sql.warehouse.dir": warehouse_for_spark,
        # Spark's Hive support pointed at the metastore, as the local engine's with catalog_uri; the
        # project's put-if-absent S3 log store comes with the local engine's settings (server_conf).
        **catalog_conf(f"thrift://127.0.0.1:{metastore_port}"),
    }
    for k, v in (s3 or {}).items():
        conf[f"spark.hadoop.{k}"] = v
    return conf
