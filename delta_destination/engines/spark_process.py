"""The local Apache Spark engine: Spark's Connect server as a child JVM of this process.

Why a child process and not a cluster: a destination on one machine should work with
nothing but Java installed. The JVM runs Delta Lake from the jars `make install` fetched
with Maven (no network and no Ivy resolution at run time).

Guarantees, each tested in tests/engines/test_spark_process.py:
- The JVM listens on loopback only, on a free port.
- It dies with this process, also on kill -9 of this process: the kernel sends it
  SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG); that thread lives
  exactly as long as the JVM (it waits on it), so a request thread that started the
  engine can end without taking the engine with it.
- No Python code runs between fork and exec in this process (which runs gRPC threads):
  the death signal is set by a fresh interpreter that then execs spark-submit
  (launcher.py), and the JVM's own process group is made by Popen in C.
- A JVM killed by a signal while it starts (a crash, not a configuration error) is
  started again, at most START_ATTEMPTS times in all and within `startup_timeout`;
  each failed attempt's scratch folder is removed before the next one.
- Its scratch space (Spark local dirs, java.io.tmpdir, uploaded batches, shuffle and
  spill files, which hold plaintext rows) is one directory private to it (0700) under
  `scratch_root()`, removed when it stops; directories of engines whose owner died are
  removed when the next engine starts.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .. import logs
from ..errors import EngineUnavailable
from ..frozen import is_frozen
from ..processes import pid_alive
from ..storage import STORES
from . import launcher

log = logs.get(__name__)

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_JARS_DIR = PROJECT_ROOT / ".spark-jars"
# Spark's Hive support for a Hive 4 metastore: pyspark's built-in 2.3 client fails every table
# lookup against it ("Invalid method name: 'get_table'"); `make install` fetches the 4.0.1 client.
HIVE_CLIENT_JARS_DIR = PROJECT_ROOT / ".hive-client-jars"
HIVE_CLIENT_VERSION = "4.0.1"
SCRATCH_PREFIX = "spark-"
# A first start and two more after a crash: a crash at start-up is rare (2 in ~30 before
# launcher.py existed), three in a row mean something is wrong with the machine or the JVM.
START_ATTEMPTS = 3


class EngineStartCrashed(EngineUnavailable):
    """The engine's JVM was killed by a signal while it started. That is the engine's (or
    the machine's) failure, not the configuration's, so another start may well succeed."""

    def __init__(self, message: str, signal_name: str):
        super().__init__(message)
        self.signal_name = signal_name


def scratch_root() -> Path:
    """Where private engine directories live (one per running engine)."""
    return Path(os.environ.get("DELTA_DESTINATION_SCRATCH", Path(tempfile.gettempdir()) / f"delta-destination-{os.getuid()}"))


def jars_dir() -> Path:
    return Path(os.environ.get("DELTA_DESTINATION_SPARK_JARS", DEFAULT_JARS_DIR))


def spark_home() -> Path:
    """The full pyspark package is a Spark distribution (bin/spark-submit, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass(frozen=True)
class SparkProcessOptions:
    """How the local engine is sized. Environment overrides exist for operators."""

    # 1.5 GB of heap: the JVM's resident set is ~1 GB above its heap (measured 3.0 GB at 2 GB of heap
    # during 1M-row appends), and the whole destination should stay within 4 GB (docs/benchmarks.md).
    driver_memory: str = field(default_factory=lambda: os.environ.get("DELTA_DESTINATION_SPARK_DRIVER_MEMORY", "1536m"))
    cores: int = field(default_factory=lambda: int(os.environ.get("DELTA_DESTINATION_SPARK_CORES", os.cpu_count() or 2)))
    startup_timeout: float = 180.0
    extra_conf: tuple[tuple[str, str], ...] = ()
    catalog_uri: Optional[str] = None   # a Hive Metastore this engine registers tables in
    # Extra options of the engine's JVM (e.g. -XX:+HeapDumpOnOutOfMemoryError), after the project's
    # own, so they win over JAVA_TOOL_OPTIONS.
    java_options: str = field(default_factory=lambda: os.environ.get("DELTA_DESTINATION_SPARK_JAVA_OPTIONS", ""))

    @property
    def shuffle_partitions(self) -> int:
        # Spark's default of 200 means 200 tiny tasks per shuffle on a small machine;
        # adaptive execution coalesces further when partitions are small.
        return max(4, 4 * self.cores)

    @property
    def snapshot_partitions(self) -> int:
        return max(2, self.cores)


def delta_jars(directory: Optional[Path] = None) -> list[Path]:
    directory = directory or jars_dir()
    jars = sorted(directory.glob("*.jar")) if directory.is_dir() else []
    if not any(j.name.startswith("delta-spark") for j in jars):
        raise EngineUnavailable(
            f"the Delta Lake jars are missing from {directory}: run `make install` (it fetches them with Maven), "
            "or set DELTA_DESTINATION_SPARK_JARS to a folder holding delta-spark and delta-storage"
        )
    return jars


def server_conf(port: int, private_dir: Path, options: SparkProcessOptions) -> dict[str, str]:
    """Spark configuration of the local engine (pure; the tests read it)."""
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        # The driver's own RPC and block manager ports: loopback too, never the machine's address.
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        # Batches up to the SDK's 128 MiB arrive in one message.
        "spark.connect.grpc.maxInboundMessageSize": str(256 * 1024 * 1024),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.ansi.enabled": "true",
        # INT96 (Spark's default) overflows other readers' nanoseconds for dates past 2262.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.shuffle.partitions": str(options.shuffle_partitions),
        "spark.default.parallelism": str(options.shuffle_partitions),
        # Delta rebuilds a table's state from its log with 50 tasks by default (sized for logs of
        # millions of files); a destination's tables are checkpointed every few commits, and 50
        # tasks per read cost seconds per statement on a small machine (measured on S3: a first
        # SELECT 45 s -> 14 s, a count after a DELETE 8.2 s -> 2.9 s with the fast tier beside it).
        "spark.databricks.delta.snapshotPartitions": str(options.snapshot_partitions),
        "spark.local.dir": str(private_dir / "local"),
        "spark.sql.warehouse.dir": str(private_dir / "spark-warehouse"),
        "spark.ui.enabled": "false",
        "spark.log.level": "WARN",
        # Plaintext never goes to an event log or a UI.
        "spark.eventLog.enabled": "false",
        # No auto compaction: it adds an OPTIMIZE commit after a write, and one request must
        # be one commit. Compaction is table upkeep's job (core/upkeep.py).
        "spark.databricks.delta.autoCompact.enabled": "false",
        **log_store_conf(jars_dir()),
    }
    if options.catalog_uri:
        conf.update(catalog_conf(options.catalog_uri))
    conf.update(dict(options.extra_conf))
    return conf


def log_store_conf(directory: Path) -> dict[str, str]:
    """Delta's log store per store, where a store has its own installed in `directory`
    (Store.spark_log_store_conf)."""
    return {key: value for store in STORES for key, value in store.spark_log_store_conf(directory).items()}


def catalog_conf(catalog_uri: str, client_jars: Path = HIVE_CLIENT_JARS_DIR) -> dict[str, str]:
    """Spark's Hive support pointed at a Hive Metastore (static: set when the JVM starts).
    >>> catalog_conf("thrift://127.0.0.1:9083", Path("/j"))["spark.sql.hive.metastore.jars.path"]
    'file:///j/*.jar'
    """
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.metastore.uris": catalog_uri,
        "spark.sql.hive.metastore.version": HIVE_CLIENT_VERSION,
        "spark.sql.hive.metastore.jars": "path",
        "spark.sql.hive.metastore.jars.path": f"file://{client_jars}/*.jar",
    }


def server_command(port: int, private_dir: Path, options: SparkProcessOptions, jars: list[Path]) -> list[str]:
    tmp = private_dir / "tmp"
    cmd = [
        str(spark_home() / "bin" / "spark-submit"),
        "--class", CONNECT_SERVER_CLASS,
        "--master", f"local[{options.cores}]",
        "--driver-memory", options.driver_memory,
        "--driver-java-options", f"-Djava.io.tmpdir={tmp} -Dderby.system.home={tmp} {options.java_options}".rstrip(),
        "--jars", ",".join(str(j) for j in jars),
        "--name", "delta-destination-engine",
    ]
    for k, v in server_conf(port, private_dir, options).items():
        cmd += ["--conf", f"{k}={v}"]
    # spark-submit needs a primary resource; the connect server class lives in pyspark's jars.
    connect_jar = next(iter(sorted((spark_home() / "jars").glob("spark-connect_*.jar"))), None)
    if connect_jar is None:
        raise EngineUnavailable("pyspark has no spark-connect jar: install the full pyspark package")
    cmd.append(str(connect_jar))
    return cmd


def free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connected_to_itself(sock: socket.socket) -> bool:
    """A TCP connect to a loopback port nobody listens on can succeed by connecting to
    itself, when the kernel picks that very port as the source (the ports we wait on come
    from the ephemeral range). Such a socket says nothing about the engine."""
    return sock.getsockname() == sock.getpeername()


def accepts_connections(port: int) -> bool:
    """Does something listen on 127.0.0.1:port (not a self-connect)?"""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            return not connected_to_itself(sock)
    except OSError:
        return False


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def clean_stale_scratch(root: Path) -> int:
    """Remove scratch directories of engines whose owning process is gone."""
    removed = 0
    if not root.is_dir():
        return 0
    for d in root.iterdir():
        if not d.name.startswith(SCRATCH_PREFIX):
            continue
        try:
            owner = int(d.name[len(SCRATCH_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if owner != os.getpid() and not pid_alive(owner):
            shutil.rmtree(d, ignore_errors=True)
            removed += 1
    return removed


def make_private_dir(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    d = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=root))
    os.chmod(d, 0o700)
    for sub in ("local", "tmp", "spark-warehouse"):
        (d / sub).mkdir(mode=0o700)
    return d


class LocalSparkServer:
    """Starts the JVM, waits until it accepts connections, stops it and cleans up."""

    def __init__(self, options: Optional[SparkProcessOptions] = None,
                 cancelled: Optional[threading.Event] = None):
        """Returns once the engine listens. `cancelled` (the destination stops) ends a start in
        progress: the JVM is stopped and its folder removed, and EngineUnavailable is raised."""
        self.options = options or SparkProcessOptions()
        self._cancelled = cancelled or threading.Event()
        started = time.monotonic()
        deadline = started + self.options.startup_timeout
        root = scratch_root()
        stale = clean_stale_scratch(root)
        if stale:
            log.info(f"removed {stale} scratch folder(s) left by engines of earlier processes")
        jars = delta_jars()
        self._proc: Optional[subprocess.Popen] = None
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start(root, jars, deadline, attempt)
                break
            except EngineStartCrashed as exc:
                if attempt == START_ATTEMPTS or time.monotonic() >= deadline:
                    raise
                log.warning(f"{exc.message}; starting it again")
        self.started_at = time.monotonic()
        log.info(f"local Apache Spark engine started in {time.monotonic() - started:.1f}s "
                 f"(attempt {attempt}, driver memory {self.options.driver_memory}, {self.options.cores} cores, "
                 f"pid {self.pid})")

    def _start(self, root: Path, jars: list[Path], deadline: float, attempt: int) -> None:
        """One start: a new private folder and port; on any failure the JVM is stopped and
        the folder removed, so a retry starts clean and a crash leaves no plaintext behind."""
        self.private_dir = make_private_dir(root)
        self.port = free_loopback_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        try:
            self._spawn(server_command(self.port, self.private_dir, self.options, jars))
            self._wait_listening(deadline, attempt)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc else None

    def _spawn(self, cmd: list[str]) -> None:
        if is_frozen():
            raise EngineUnavailable("the local Apache Spark engine needs a normal installation (`make install`), "
                                    "not the single-file binary: use the embedded engine or a Spark Connect URL")
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_DIRS": str(self.private_dir / "local"),
               "SPARK_LOG_DIR": str(self.private_dir / "tmp"), "SPARK_CONF_DIR": str(self.private_dir / "tmp")}
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)  # the server is classic Spark
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        try:
            # The JVM's output stays in its private folder: engine messages can quote values.
            with open(self.private_dir / "engine.log", "ab") as out:
                self._proc = launcher.spawn_owned(cmd, name="spark-engine", cwd=self.private_dir, env=env, stdout=out)
        except OSError as exc:
            raise EngineUnavailable(f"cannot start the local Spark engine's launcher ({type(exc).__name__})") from exc

    def _wait_listening(self, deadline: float, attempt: int) -> None:
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                if code < 0:
                    name = signal_name(-code)
                    raise EngineStartCrashed(f"the local Spark engine was killed by {name} during start-up "
                                             f"(attempt {attempt} of {START_ATTEMPTS}): " + self.startup_failure(), name)
                # An exit code is the JVM's or spark-submit's verdict (no Java, bad options): not retried.
                after = f" (attempt {attempt})" if attempt > 1 else ""
                raise EngineUnavailable(f"the local Spark engine exited with code {code} during start-up{after}: "
                                        + self.startup_failure())
            if accepts_connections(self.port):
                return
            if self._cancelled.wait(0.2):
                raise EngineUnavailable("the destination is stopping (the local Spark engine's start was cancelled)")
        raise EngineUnavailable(f"the local Spark engine did not listen within {self.options.startup_timeout:.0f}s")

    def startup_failure(self) -> str:
        """The exception lines of the engine's start-up log (no data flowed yet)."""
        try:
            lines = (self.private_dir / "engine.log").read_text(errors="replace").splitlines()
        except OSError:
            return "no engine log"
        wanted = [ln.strip() for ln in lines if "Exception" in ln or "Error" in ln][:3]
        # A JVM that aborted leaves hs_err_pid<N>.log in its working directory (the private
        # folder, removed with it): its '#' header names the fatal error (never the environment).
        for crash in sorted(self.private_dir.glob("hs_err_pid*.log"))[:1]:
            header = [ln.strip("# ").strip() for ln in crash.read_text(errors="replace").splitlines()[:12]
                      if ln.startswith("#") and ln.strip("# ").strip()]
            wanted += header[:4]
        if not wanted:
            wanted = [ln.strip() for ln in lines if ln.strip()][-2:]
        return "; ".join(wanted)[:800] or "the engine log is empty"

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.private_dir, ignore_errors=True)
