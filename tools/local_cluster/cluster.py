"""LocalCluster: start, describe and stop the local cluster's processes (in the process that
uses it: the tests, the benchmark, or the supervisor of `make cluster`)."""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from delta_destination.engines import launcher
from delta_destination.engines.spark_process import CONNECT_SERVER_CLASS, accepts_connections, spark_home

from .config import (APP_NAME, BUCKET, DEFAULT_STATE_DIR, HIVE_CLIENT_JARS, MASTER_CLASS, METASTORE_JARS,
                     METASTORE_LOG4J, ROOT, SPARK_JARS, SUPERVISOR_LOG, WAREHOUSE_PREFIX, WORKER_CLASS, ClusterError,
                     ClusterOptions, connect_conf, jars_in, metastore_command, metastore_site, s3a_jars,
                     s3a_settings, to_s3a, write_private)
from .processes import processes_mentioning, stop_group, tree_rss


@dataclass
class Part:
    """One process of the cluster."""

    name: str
    proc: Optional[subprocess.Popen]
    log: Optional[Path]
    spawned_at: float
    ready_in: Optional[float] = None

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def s3_server_available() -> bool:
    try:
        from .. import s3_server
    except ImportError:
        return False
    try:
        s3_server.weed_binary()
    except Exception:  # noqa: BLE001 - its own error type: "not installed"
        return False
    return bool(s3a_jars())


def http_json(url: str, timeout: float = 3.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback URLs we built
        return json.loads(resp.read().decode())


class LocalCluster:
    """Start, describe and stop the cluster. `with LocalCluster() as c: c.env()["SPARK_REMOTE"]`."""

    def __init__(self, state_dir: Path = DEFAULT_STATE_DIR, options: Optional[ClusterOptions] = None):
        self.state_dir = Path(state_dir).resolve()
        self.options = options or ClusterOptions()
        self.parts: dict[str, Part] = {}
        self.ports: dict[str, int] = {}
        self.s3 = None  # tools.s3_server.S3Server when the warehouse is on S3
        self.warehouse = ""  # as the destination spells it: s3://bucket/prefix or file:///dir
        self.started_in: Optional[float] = None
        self.timings: dict[str, float] = {}
        self.app_id: Optional[str] = None

    # ---- life cycle -------------------------------------------------------------------------

    def start(self) -> "LocalCluster":
        began = time.monotonic()
        try:
            self._prepare_state_dir()
            self._start_storage()
            self._spawn_all()
            self._wait_ready(began)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        self.timings["cluster"] = self.started_in
        self.write_state()
        return self

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Connect server first (its executors end with the application), then the workers, the
        master, the metastore and the S3 server; each by TERM to its process group, KILL after
        `stop_grace` seconds."""
        order = ["connect"] + [n for n in self.parts if n.startswith("worker")] + ["master", "metastore"]
        for name in order:
            part = self.parts.get(name)
            if part is not None and part.proc is not None:
                stop_group(part.proc.pid, self.options.stop_grace, proc=part.proc)
        # Whatever still carries this cluster's directory in its command line (executors whose
        # worker died first) goes too.
        for pid in processes_mentioning(self.state_dir):
            stop_group(pid, 5.0)
        if self.s3 is not None:
            self.s3.stop()
            self.s3 = None
        for name in ("env", "pids"):
            (self.state_dir / name).unlink(missing_ok=True)

    # ---- what clients need ------------------------------------------------------------------------

    @property
    def spark_remote(self) -> str:
        return f"sc://127.0.0.1:{self.ports['connect']}"

    @property
    def spark_ui(self) -> str:
        return f"http://127.0.0.1:{self.ports['spark_ui']}"

    @property
    def master_ui(self) -> str:
        return f"http://127.0.0.1:{self.ports['master_ui']}"

    @property
    def catalog_uri(self) -> str:
        return f"thrift://127.0.0.1:{self.ports['metastore']}"

    def destination_settings(self) -> dict[str, str]:
        """The settings a door (an Airbyte config, a Conduit connector) needs to write through this
        cluster, under the settings schema's keys: the engine, the warehouse, the catalog and the
        storage credentials (a secret: for configs in private test folders only)."""
        env = self.env()
        out = {"warehouse": env["WAREHOUSE"], "engine": "spark", "spark_remote": env["SPARK_REMOTE"],
               "catalog_uri": env["CATALOG_URI"]}
        if self.s3 is not None:
            out.update({"s3_endpoint": env["AWS_ENDPOINT_URL"], "s3_region": env["AWS_REGION"],
                        "s3_access_key_id": env["AWS_ACCESS_KEY_ID"],
                        "s3_secret_access_key": env["AWS_SECRET_ACCESS_KEY"]})
        return out

    def env(self) -> dict[str, str]:
        """The connection facts, as `.cluster/env` holds them."""
        env = {
            "SPARK_REMOTE": self.spark_remote,
            "WAREHOUSE": self.warehouse,
            "CATALOG_URI": self.catalog_uri,
            "SPARK_UI": self.spark_ui,
            "SPARK_MASTER_UI": self.master_ui,
        }
        if self.s3 is not None:
            env.update(self.s3.env())
        return env

    def pids(self) -> dict[str, int]:
        pids = {name: p.pid for name, p in self.parts.items() if p.pid is not None}
        if self.s3 is not None and self.s3.pid is not None:
            pids["s3"] = self.s3.pid
        return pids

    def worker_uis(self) -> dict[str, str]:
        return {f"worker{i}": f"http://127.0.0.1:{self.ports[f'worker{i}_ui']}" for i in range(1, self.options.workers + 1)}

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each part's whole process tree (a worker's includes its executor)."""
        out = {}
        for name, pid in self.pids().items():
            out[name] = tree_rss(pid)
        return out

    def write_state(self) -> None:
        write_private(self.state_dir / "env", "".join(f"{k}={shlex.quote(v)}\n" for k, v in self.env().items()))
        write_private(self.state_dir / "pids", "".join(f"{name} {pid}\n" for name, pid in self.pids().items()))
        write_private(self.state_dir / "timings.json", json.dumps(self.timings, indent=1))

    # ---- start-up ------------------------------------------------------------------------------------

    def _prepare_state_dir(self) -> None:
        """Empty the state directory (the directory itself stays: `start` locks it)."""
        self.state_dir.mkdir(parents=True, mode=0o700, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        for entry in self.state_dir.iterdir():
            if entry.name == SUPERVISOR_LOG:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        for sub in ("logs", "tmp", "connect/local", "connect/tmp", "connect/executor-tmp", "metastore/conf",
                    "spark-conf"):
            (self.state_dir / sub).mkdir(parents=True, mode=0o700, exist_ok=True)

    def _start_storage(self) -> None:
        want = self.options.storage
        if want not in ("auto", "s3", "local"):
            raise ClusterError(f"storage must be auto, s3 or local, not {want!r}")
        if want == "s3" or (want == "auto" and s3_server_available()):
            if not s3a_jars():
                raise ClusterError("the S3A jars are missing from .spark-jars: run `make install`")
            from ..s3_server import S3Server

            t = time.monotonic()
            # The S3 server ties itself to the thread starting it, like the JVMs here.
            self.s3 = S3Server(BUCKET).start()
            self.timings["s3"] = time.monotonic() - t
            self.warehouse = self.s3.url(WAREHOUSE_PREFIX)
        else:
            directory = self.state_dir / "warehouse"
            directory.mkdir(mode=0o700)
            self.warehouse = directory.as_uri()

    def _s3_hadoop(self) -> Optional[dict[str, str]]:
        return s3a_settings(self.s3.endpoint_url, self.s3.region) if self.s3 is not None else None

    def _pick_ports(self) -> None:
        names = ["metastore", "master", "master_ui", "connect", "spark_ui"]
        for i in range(1, self.options.workers + 1):
            names += [f"worker{i}", f"worker{i}_ui"]
        held = []
        try:
            for name in names:
                s = socket.socket()
                s.bind(("127.0.0.1", 0))
                held.append(s)
                self.ports[name] = s.getsockname()[1]
        finally:
            for s in held:
                s.close()

    def _child_env(self, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        for k in ("SPARK_CONNECT_MODE_ENABLED", "PYSPARK_SUBMIT_ARGS", "SPARK_REMOTE", "SPARK_CONF_DIR",
                  "SPARK_LOCAL_DIRS", "SPARK_WORKER_DIR"):
            env.pop(k, None)
        env.update({
            "SPARK_HOME": str(spark_home()),
            # Every Spark daemon and web UI binds to loopback (the UIs bind to SPARK_LOCAL_IP).
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_CONF_DIR": str(self.state_dir / "spark-conf"),
            "SPARK_LOG_DIR": str(self.state_dir / "logs"),
            "SPARK_PID_DIR": str(self.state_dir / "tmp"),
        })
        if self.s3 is not None:
            # Keys reach S3A through the environment, never a command line or a config file.
            env.update(self.s3.env())
        env.update(extra or {})
        return env

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str], cwd: Path) -> Part:
        log = self.state_dir / "logs" / f"{name}.log"
        with open(log, "ab") as out:
            # No Python between fork and exec (the tests run gRPC threads): the launcher sets the
            # death signal in the new program, then execs it (same pid).
            proc = subprocess.Popen(
                launcher.command(cmd) if self.options.die_with_starter else cmd,
                cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() signals it with its children
            )
        part = Part(name, proc, log, time.monotonic())
        self.parts[name] = part
        return part

    def _spawn_all(self) -> None:
        """All JVMs at once: each waits for what it needs (workers retry the master, the driver
        retries it too, the metastore is asked only at the first catalog call)."""
        self._pick_ports()
        self._spawn_metastore()
        self._spawn_master()
        for i in range(1, self.options.workers + 1):
            self._spawn_worker(i)
        self._spawn_connect()

    def _spawn_metastore(self) -> None:
        ms = self.state_dir / "metastore"
        jars_in(METASTORE_JARS, "Hive metastore", "cluster-jars")  # missing: a clear error
        extra = s3a_jars() if self.s3 is not None else []
        warehouse = to_s3a(self.warehouse)
        (ms / "conf" / "metastore-site.xml").write_text(
            metastore_site(self.ports["metastore"], ms / "db", warehouse, self._s3_hadoop()))
        (ms / "conf" / "metastore-log4j2.properties").write_text(METASTORE_LOG4J)
        cmd = metastore_command(ms, self.options.metastore_memory, extra)
        # A CLASSPATH variable of the caller would go first; the metastore's own jars must win.
        env = self._child_env()
        env.pop("CLASSPATH", None)
        self._spawn("metastore", cmd, env, ms)

    def _daemon_env(self, tmp: Path, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
        return self._child_env({
            "SPARK_DAEMON_MEMORY": self.options.daemon_memory,
            # The state directory in every daemon's command line marks the process as this cluster's.
            "SPARK_DAEMON_JAVA_OPTS": f"-Djava.io.tmpdir={tmp} -XX:+UseSerialGC",
            **(extra or {}),
        })

    def _spawn_master(self) -> None:
        tmp = self.state_dir / "master"
        tmp.mkdir(mode=0o700)
        cmd = [str(spark_home() / "bin" / "spark-class"), MASTER_CLASS, "--host", "127.0.0.1",
               "--port", str(self.ports["master"]), "--webui-port", str(self.ports["master_ui"])]
        # No REST submission server: it would listen on the fixed port 6066 (clashing with a second
        # cluster) and nothing here submits through it.
        self._spawn("master", cmd, self._daemon_env(tmp, {"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}), tmp)

    def _spawn_worker(self, i: int) -> None:
        d = self.state_dir / f"worker{i}"
        for sub in ("work", "local", "tmp"):
            (d / sub).mkdir(parents=True, mode=0o700, exist_ok=True)   # exists at a restart
        os.chmod(d, 0o700)
        cmd = [str(spark_home() / "bin" / "spark-class"), WORKER_CLASS, "--host", "127.0.0.1",
               "--port", str(self.ports[f"worker{i}"]), "--webui-port", str(self.ports[f"worker{i}_ui"]),
               "--cores", str(self.options.worker_cores), "--memory", self.options.worker_memory,
               "--work-dir", str(d / "work"), f"spark://127.0.0.1:{self.ports['master']}"]
        # Executors inherit the worker's environment: their shuffle and spill files go to this
        # worker's own local directory, their S3 keys come from here.
        env = self._daemon_env(d / "tmp", {"SPARK_LOCAL_DIRS": str(d / "local")})
        self._spawn(f"worker{i}", cmd, env, d)

    def _spawn_connect(self) -> None:
        scratch = self.state_dir / "connect"
        conf = connect_conf(grpc_port=self.ports["connect"], ui_port=self.ports["spark_ui"], scratch=scratch,
                            warehouse_for_spark=to_s3a(self.warehouse), metastore_port=self.ports["metastore"],
                            options=self.options, s3=self._s3_hadoop())
        jars = jars_in(SPARK_JARS, "Delta Lake", "install")
        if self.s3 is None:
            jars = [j for j in jars if j.name.startswith("delta-")]
        jars_in(HIVE_CLIENT_JARS, "Hive 4 client", "cluster-jars")
        tmp = scratch / "tmp"
        cmd = [
            str(spark_home() / "bin" / "spark-submit"),
            "--class", CONNECT_SERVER_CLASS,
            "--master", f"spark://127.0.0.1:{self.ports['master']}",
            "--deploy-mode", "client",
            "--driver-memory", self.options.driver_memory,
            "--driver-java-options", f"-Djava.io.tmpdir={tmp} -Dderby.system.home={tmp}",
            "--jars", ",".join(str(j) for j in jars),
            "--name", APP_NAME,
        ]
        for k, v in conf.items():
            cmd += ["--conf", f"{k}={v}"]
        connect_jar = next(iter(sorted((spark_home() / "jars").glob("spark-connect_*.jar"))), None)
        if connect_jar is None:
            raise ClusterError("pyspark has no spark-connect jar: install the full pyspark package")
        cmd.append(str(connect_jar))
        self._spawn("connect", cmd, self._child_env({"SPARK_LOCAL_DIRS": str(scratch / "local")}), scratch)

    def restart_worker(self, i: int, timeout: float = 300.0) -> None:
        """Start worker `i` again after it died (the crash tests kill one), on its old ports and
        directories, and wait until the master lists it ALIVE and the application has an active
        executor on every worker again (the master gives the application the new worker's core)."""
        name = f"worker{i}"
        old = self.parts.get(name)
        if old is not None and old.alive():
            raise ClusterError(f"{name} is still running")
        if old is not None and old.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                old.proc.wait(5)
            stop_group(old.proc.pid, 5.0)   # an executor of the old worker that outlived it
        began = time.monotonic()
        self._spawn_worker(i)
        while True:
            part = self.parts[name]
            if not part.alive():
                raise ClusterError(f"{name} exited with code {part.proc.returncode} at its restart: {self.log_tail(name)}")
            with contextlib.suppress(OSError, ValueError, urllib.error.URLError):
                if self._worker_registered(i) and self._executors_registered():
                    break
            if time.monotonic() - began > timeout:
                raise ClusterError(f"{name} not back with an executor within {timeout:.0f}s: {self.log_tail(name)}")
            time.sleep(0.5)
        part.ready_in = time.monotonic() - began
        self.write_state()

    # ---- readiness -------------------------------------------------------------------------------------

    def _wait_ready(self, began: float) -> None:
        deadline = began + self.options.startup_timeout
        checks: dict[str, Callable[[], bool]] = {
            "metastore": lambda: accepts_connections(self.ports["metastore"]),
            "master": self._master_alive,
            **{f"worker{i}": (lambda i=i: self._worker_registered(i)) for i in range(1, self.options.workers + 1)},
            "connect": lambda: accepts_connections(self.ports["connect"]),
            "executors": self._executors_registered,
        }
        pending = dict(checks)
        while pending:
            for name, part in self.parts.items():
                if not part.alive():
                    code = part.proc.returncode if part.proc else None
                    raise ClusterError(f"{name} exited with code {code} during start-up: {self.log_tail(name)}")
            for name, check in list(pending.items()):
                try:
                    ok = check()
                except (OSError, ValueError, urllib.error.URLError):
                    ok = False
                if ok:
                    del pending[name]
                    self.timings[name] = time.monotonic() - began
                    if name in self.parts:
                        self.parts[name].ready_in = self.timings[name]
            if pending and time.monotonic() > deadline:
                raise ClusterError(f"not ready within {self.options.startup_timeout:.0f}s: {', '.join(pending)}; "
                                   + "; ".join(f"{n}: {self.log_tail(n, 300)}" for n in pending if n in self.parts))
            if pending:
                time.sleep(0.5)

    def _master_alive(self) -> bool:
        return http_json(f"{self.master_ui}/json").get("status") == "ALIVE"

    def _worker_registered(self, i: int) -> bool:
        port = self.ports[f"worker{i}"]
        workers = http_json(f"{self.master_ui}/json").get("workers", [])
        return any(w.get("state") == "ALIVE" and w.get("port") == port for w in workers)

    def _executors_registered(self) -> bool:
        apps = http_json(f"{self.spark_ui}/api/v1/applications")
        if not apps:
            return False
        self.app_id = apps[0]["id"]
        executors = [e for e in http_json(f"{self.spark_ui}/api/v1/applications/{self.app_id}/executors")
                     if e["id"] != "driver" and e.get("isActive")]
        return len(executors) >= self.options.workers

    def log_tail(self, name: str, chars: int = 1200) -> str:
        """The last error lines of a part's log (start-up logs: no rows have flowed yet)."""
        part = self.parts.get(name)
        if part is None or part.log is None:
            return "no log"
        try:
            lines = part.log.read_text(errors="replace").splitlines()
        except OSError:
            return "no log"
        wanted = [ln.strip() for ln in lines if "Exception" in ln or "Error" in ln or "ERROR" in ln][-4:]
        return ("; ".join(wanted or [ln.strip() for ln in lines[-3:]]))[-chars:] or "empty log"

    # ---- where the work ran ----------------------------------------------------------------------------

    def executor_workers(self) -> dict[str, str]:
        """executor id -> the worker that runs it, from each worker's own status page."""
        out = {}
        for worker, ui in self.worker_uis().items():
            state = http_json(f"{ui}/json")
            for ex in state.get("executors", []):
                if ex.get("appid") == self.app_id:
                    out[str(ex["id"])] = worker
        return out

    def completed_tasks_by_worker(self) -> dict[str, int]:
        """worker name -> tasks its executors completed for the Connect server's application."""
        per_executor = completed_tasks_by_executor(self.spark_ui, self.app_id)
        where = self.executor_workers()
        out = {w: 0 for w in self.worker_uis()}
        for ex, n in per_executor.items():
            out[where.get(ex, f"executor {ex}")] = out.get(where.get(ex, f"executor {ex}"), 0) + n
        return out


def completed_tasks_by_executor(spark_ui: str, app_id: Optional[str] = None) -> dict[str, int]:
    """executor id -> completed tasks, from the application UI's REST API (the driver excluded).
    Works against any Spark application UI, e.g. SPARK_UI of `.cluster/env`."""
    if app_id is None:
        apps = http_json(f"{spark_ui}/api/v1/applications")
        if not apps:
            raise ClusterError(f"no application at {spark_ui}")
        app_id = apps[0]["id"]
    # allexecutors: executors that left (a worker lost mid-run) keep their counts.
    executors = http_json(f"{spark_ui}/api/v1/applications/{app_id}/allexecutors")
    return {str(e["id"]): int(e.get("completedTasks", 0)) for e in executors if e["id"] != "driver"}


SECOND_SESSION = """
import json, os, sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(os.environ["SPARK_REMOTE"]).getOrCreate()
out = {"session": spark.session_id}
out["tables"] = sorted(r.tableName for r in spark.sql(f"SHOW TABLES IN {sys.argv[1]}").collect())
if len(sys.argv) > 2:
    rows = spark.sql(f"SELECT count(*) AS n, sum(id) AS s, min(label) AS lo FROM {sys.argv[2]}").collect()[0]
    out["rows"] = [rows.n, rows.s, rows.lo]
print(json.dumps(out))
"""


def another_session_sees(spark_remote: str, schema: str, table: Optional[str] = None) -> dict:
    """What another process, with its own Spark Connect session on the same server, sees by name:
    the tables of `schema`, and for `table` (with columns id and label) its count, sum(id) and
    min(label). How a user of the catalog finds what the destination wrote."""
    env = {**os.environ, "SPARK_REMOTE": spark_remote}
    args = [schema] + ([table] if table else [])
    out = subprocess.run([sys.executable, "-c", SECOND_SESSION, *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0:
        raise AssertionError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])
