"""The local Apache Spark engine's process contract: a child JVM on loopback with a private
scratch folder, that dies with the destination (also on kill -9) and leaves no plaintext."""
from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import psutil
import pytest
import tomllib

from delta_destination.engines import spark_process as sp
from testkit.processes import spark_jvms_below
from testkit.server_process import ROOT, RunningServer


def test_server_conf_is_loopback_delta_utc_ansi_and_private(tmp_path):
    conf = sp.server_conf(15002, tmp_path, sp.SparkProcessOptions(driver_memory="1g", cores=2))
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert conf["spark.connect.grpc.binding.port"] == "15002"
    assert conf["spark.driver.bindAddress"] == conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.sql.ansi.enabled"] == "true"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.local.dir"].startswith(str(tmp_path))
    assert conf["spark.ui.enabled"] == "false"
    # One request, one commit: auto compaction would add an OPTIMIZE commit after writes.
    assert conf["spark.databricks.delta.autoCompact.enabled"] == "false"


def test_command_bounds_driver_memory_and_passes_only_delta_jars(tmp_path):
    jars = sp.delta_jars()
    cmd = sp.server_command(15002, tmp_path, sp.SparkProcessOptions(driver_memory="1536m", cores=2), jars)
    assert cmd[cmd.index("--driver-memory") + 1] == "1536m"
    assert cmd[cmd.index("--master") + 1] == "local[2]"
    passed = cmd[cmd.index("--jars") + 1].split(",")
    # The jars `make install` fetched (Delta, S3A and the AWS SDK modules), never pyspark's own.
    assert all(Path(j).parent == sp.jars_dir() for j in passed)
    assert any(Path(j).name.startswith("delta-spark_") for j in passed)
    assert f"-Djava.io.tmpdir={tmp_path / 'tmp'}" in cmd[cmd.index("--driver-java-options") + 1]


def test_extra_java_options_come_last_so_they_win():
    options = sp.SparkProcessOptions(java_options="-XX:TieredStopAtLevel=4 -Xss4m")
    cmd = sp.server_command(15002, Path("/x"), options, [])
    assert cmd[cmd.index("--driver-java-options") + 1] == (
        "-Djava.io.tmpdir=/x/tmp -Dderby.system.home=/x/tmp -XX:TieredStopAtLevel=4 -Xss4m")


def test_pinned_pyspark_and_delta_jars_are_a_pair():
    """Delta 4.4 is built per Spark line (delta-spark_4.2_2.13): the pom and pyproject agree."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pyspark = next(d for d in deps if d.startswith("pyspark")).split("==")[1]
    delta = next(d for d in deps if d.startswith("delta-spark")).split("==")[1]
    pom = (ROOT / "jvm" / "pom.xml").read_text()
    assert f"<delta.version>{delta}</delta.version>" in pom
    assert f"<spark.line>{'.'.join(pyspark.split('.')[:2])}</spark.line>" in pom
    assert any(j.name == f"delta-spark_{'.'.join(pyspark.split('.')[:2])}_2.13-{delta}.jar" for j in sp.delta_jars())


def test_missing_jars_give_a_clear_error(tmp_path):
    from delta_destination.errors import EngineUnavailable

    with pytest.raises(EngineUnavailable, match="make install"):
        sp.delta_jars(tmp_path)


def test_waiting_for_the_engine_port_is_not_fooled_by_a_tcp_self_connect():
    import socket

    # Force what the kernel does by chance: a socket whose source port is the target port
    # connects to itself although nobody listens there.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.connect(("127.0.0.1", port))
        assert sp.connected_to_itself(sock)
    assert not sp.accepts_connections(port)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert sp.accepts_connections(listener.getsockname()[1])


def test_an_aborted_jvm_start_is_reported_with_its_fatal_error_not_its_environment(tmp_path):
    (tmp_path / "engine.log").write_text("WARNING: Using incubator modules\nstarting\n")
    (tmp_path / "hs_err_pid77.log").write_text(
        "#\n# A fatal error has been detected by the Java Runtime Environment:\n#\n"
        "#  SIGSEGV (0xb) at pc=0x00007f, pid=77, tid=78\n#\n"
        "# JRE version: OpenJDK Runtime Environment (17.0.12+7)\n"
        "---------------  S U M M A R Y ------------\n\nEnvironment Variables:\nAWS_SECRET_ACCESS_KEY=hunter2\n")
    server = object.__new__(sp.LocalSparkServer)
    server.private_dir = tmp_path
    text = server.startup_failure()
    assert "A fatal error has been detected" in text and "SIGSEGV" in text
    assert "hunter2" not in text
    (tmp_path / "hs_err_pid77.log").unlink()
    assert server.startup_failure() == "WARNING: Using incubator modules; starting"


def test_stale_scratch_of_dead_owners_is_removed_live_ones_kept(tmp_path):
    dead = psutil.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"{sp.SCRATCH_PREFIX}{dead.pid}-abc"
    live = tmp_path / f"{sp.SCRATCH_PREFIX}{os.getppid()}-def"
    other = tmp_path / "unrelated"
    for d in (stale, live, other):
        d.mkdir()
    assert sp.clean_stale_scratch(tmp_path) == 1
    assert not stale.exists() and live.exists() and other.exists()


def _engine_jvm(server: RunningServer, wait_seconds: float = 30) -> psutil.Process:
    deadline = time.time() + wait_seconds
    while time.time() < deadline:
        # Not spark-class's launcher step, a short java with the same arguments that may also be
        # a zombie for a moment (CI failed on psutil.ZombieProcess here): spark_jvms_below skips both.
        for child in spark_jvms_below(server.proc.pid):
            try:
                if "java" in child.name():
                    return child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.5)
    raise AssertionError("no engine JVM under the destination")


def test_kill_9_of_the_destination_takes_the_jvm_and_the_next_start_removes_its_scratch(tmp_path, dedicated_server):
    scratch = tmp_path / "scratch"
    env = {"DELTA_DESTINATION_SCRATCH": str(scratch)}
    srv = dedicated_server(tmp_path / "wh", tmp_path / "one.log", engine="spark", own_jvm=True, env=env)
    try:
        jvm = _engine_jvm(srv)
        # The JVM listens on loopback only.
        listening = [c.laddr for c in jvm.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN]
        assert listening and all(addr.ip in ("127.0.0.1", "::ffff:127.0.0.1") for addr in listening), listening
        folders = [d for d in scratch.iterdir() if d.name.startswith(sp.SCRATCH_PREFIX)]
        assert len(folders) == 1
        assert stat.S_IMODE(scratch.stat().st_mode) == 0o700
        assert stat.S_IMODE(folders[0].stat().st_mode) == 0o700
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(30)
        jvm.wait(30)  # the kernel kills it with its parent (PR_SET_PDEATHSIG)
        assert not jvm.is_running()
    finally:
        srv.stop()
    assert folders[0].exists()  # a kill -9 cannot clean up ...
    srv2 = dedicated_server(tmp_path / "wh", tmp_path / "two.log", engine="spark", own_jvm=True, env=env)
    try:
        assert not folders[0].exists()  # ... the next engine start does
        assert "removed 1 scratch folder" in srv2.log_text()
    finally:
        srv2.stop()
    # A clean stop removes the engine's own folder and leaves no JVM.
    assert not [d for d in scratch.iterdir() if d.name.startswith(sp.SCRATCH_PREFIX)]


def test_sigterm_while_the_engine_starts_stops_it_and_removes_its_scratch(tmp_path, dedicated_server):
    """Fivetran (or Ctrl-C) may stop the destination at any moment, also before it is ready."""
    scratch = tmp_path / "scratch"
    srv = dedicated_server(tmp_path / "wh", tmp_path / "log", engine="spark", own_jvm=True,
                           env={"DELTA_DESTINATION_SCRATCH": str(scratch)}, ready_timeout=None)
    try:
        jvm = _engine_jvm(srv, wait_seconds=120)
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(60) == 0
        jvm.wait(30)
        assert not jvm.is_running()
    finally:
        srv.stop()
    log = (tmp_path / "log").read_text()
    assert "destination stopped" in log and "destination ready" not in log, log[-2000:]
    assert not [d for d in scratch.iterdir() if d.name.startswith(sp.SCRATCH_PREFIX)]


def test_a_stopped_destination_starts_no_engine():
    """A health check still running at shutdown must not start a JVM nobody would stop."""
    from delta_destination.errors import EngineUnavailable
    from delta_destination.engines.pool import EnginePool
    from delta_destination.settings import Settings

    engines = EnginePool()
    engines.stop()
    for engine in ("spark", "sail"):
        with pytest.raises(EngineUnavailable, match="stopping"):
            with engines.lease(Settings.create("/tmp/unused-warehouse", engine)):
                pass
    assert not engines.answers(Settings.create("/tmp/unused-warehouse", "spark"))


def test_health_follows_the_engine_and_a_dead_jvm_is_restarted(tmp_path, dedicated_server):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from delta_destination.doors.fivetran._proto import common_pb2

    srv = dedicated_server(tmp_path / "wh", tmp_path / "log", engine="spark", own_jvm=True,
                           env={"DELTA_DESTINATION_SCRATCH": str(tmp_path / "scratch"), "FIVETRAN_DELTA_HEALTH_INTERVAL": "1"})
    try:
        assert "local Apache Spark engine started in" in srv.log_text()
        health = health_pb2_grpc.HealthStub(srv.channel)
        jvm = _engine_jvm(srv)
        jvm.kill()
        jvm.wait(30)
        deadline = time.time() + 60
        while health.Check(health_pb2.HealthCheckRequest(service="")).status == health_pb2.HealthCheckResponse.SERVING:
            assert time.time() < deadline, "health still SERVING with the engine gone"
            time.sleep(0.5)
        # The next request starts a new engine and succeeds.
        resp = srv.stub.Test(common_pb2.TestRequest(name="spark_engine", configuration={}), timeout=300)
        assert resp.success, resp
        assert _engine_jvm(srv).pid != jvm.pid
        # Health comes back, and the log tells the operator both changes.
        deadline = time.time() + 60
        while health.Check(health_pb2.HealthCheckRequest(service="")).status != health_pb2.HealthCheckResponse.SERVING:
            assert time.time() < deadline, "health not SERVING again with a new engine answering"
            time.sleep(0.5)
        log = srv.log_text()
        assert "engine Apache Spark (local) does not answer" in log
        assert log.count("destination ready:") == 2, log[-3000:]
        # And it still stops on SIGTERM: the clients of the killed engine (the warm-up's among
        # them) once kept the process alive in PySpark's exit hooks after "destination stopped".
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(60) == 0
        assert "destination stopped" in srv.log_text()
    finally:
        srv.stop()


# --- Starting the JVM: no Python between fork and exec, death signal, retry of crashed starts ---

def test_a_launched_program_dies_with_its_parent_also_on_kill_9():
    """launcher.py is what makes the JVM die with the destination; here with a plain program."""
    import subprocess
    import sys

    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time\n"
         "from delta_destination.engines import launcher\n"
         "child = subprocess.Popen(launcher.command(['/bin/sleep', '600']))\n"
         "print(child.pid, flush=True)\n"
         "time.sleep(600)\n"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        deadline = time.time() + 30
        while child.name() != "sleep":  # exec keeps the pid: the launcher becomes the program
            assert time.time() < deadline, child.cmdline()
            time.sleep(0.05)
        parent.kill()
        parent.wait(30)
        child.wait(30)  # killed by the kernel (PR_SET_PDEATHSIG), not orphaned
    finally:
        parent.kill()
        parent.wait()


def test_the_launcher_starts_nothing_when_its_owner_is_already_gone(tmp_path):
    """The owner may die between fork and prctl; then no death signal would ever come."""
    import subprocess

    from delta_destination.engines import launcher

    gone = psutil.Popen(["true"])
    gone.wait()
    argv = launcher.command(["/usr/bin/touch", str(tmp_path / "started")])
    argv[argv.index(str(os.getpid()))] = str(gone.pid)
    assert subprocess.run(argv).returncode == launcher.PARENT_GONE
    assert not (tmp_path / "started").exists()
    assert subprocess.run(launcher.command(["/usr/bin/touch", str(tmp_path / "started")])).returncode == 0
    assert (tmp_path / "started").exists()


_FORK_MARKERS: list[Path] = []


def _python_ran_in_a_forked_child() -> None:
    for marker in _FORK_MARKERS:
        marker.touch()


os.register_at_fork(after_in_child=_python_ran_in_a_forked_child)


def test_no_python_runs_between_fork_and_exec_and_an_exit_code_is_not_retried(tmp_path, monkeypatch):
    """With `preexec_fn`, CPython runs the at-fork handlers (gRPC registers some) in the child
    of a process that runs gRPC threads; without, it forks and execs in C. An invalid heap
    size makes the JVM exit with an error code: the configuration's fault, so no retry."""
    from delta_destination.errors import EngineUnavailable

    monkeypatch.setenv("DELTA_DESTINATION_SCRATCH", str(tmp_path / "scratch"))
    marker = tmp_path / "python-ran-in-the-child"
    _FORK_MARKERS.append(marker)
    try:
        with pytest.raises(EngineUnavailable) as failed:
            sp.LocalSparkServer(sp.SparkProcessOptions(driver_memory="1x", cores=2))
    finally:
        _FORK_MARKERS.remove(marker)
    assert not isinstance(failed.value, sp.EngineStartCrashed)
    assert "exited with code 1 during start-up:" in failed.value.message, failed.value.message
    assert "Could not create the Java Virtual Machine" in failed.value.message
    assert not marker.exists(), "Python code ran in the forked child"
    assert not [d for d in (tmp_path / "scratch").iterdir() if d.name.startswith(sp.SCRATCH_PREFIX)]


class _JvmCrasher:
    """Sends a signal to this process's engine JVMs (direct children that became java)
    while they start, the way a crash would end them: the first `times` of them. Only JVMs
    started after it: the session's shared engine (tests/conftest.py) is a child too."""

    def __init__(self, sig: int, times: int):
        import threading

        self.sig, self.times = sig, times
        self.crashed: list[int] = []  # pids
        self._before = {c.pid for c in psutil.Process().children()}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        seen: set[int] = set(self._before)
        while not self._done.is_set() and len(self.crashed) < self.times:
            for child in psutil.Process().children():
                try:
                    if child.pid in seen or child.name() != "java":
                        continue
                    seen.add(child.pid)
                    # (its cwd is no reliable name of its private folder: HotSpot briefly changes
                    # directory into /tmp/hsperfdata_<user> while it sets up its perf data file)
                    child.send_signal(self.sig)
                    self.crashed.append(child.pid)
                except psutil.NoSuchProcess:
                    pass
            time.sleep(0.02)

    def stop(self):
        self._done.set()
        self._thread.join(10)


def test_an_engine_killed_by_a_signal_during_start_up_is_started_again_in_a_fresh_folder(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("DELTA_DESTINATION_SCRATCH", str(tmp_path / "scratch"))
    caplog.set_level("INFO", logger="delta_destination")
    # SIGABRT: HotSpot installs no handler for it (it does for SIGSEGV, so an external
    # SIGSEGV may or may not become an abort, depending on how far the JVM got).
    crasher = _JvmCrasher(signal.SIGABRT, times=1)
    try:
        server = sp.LocalSparkServer(sp.SparkProcessOptions(cores=2))
    finally:
        crasher.stop()
    try:
        assert len(crasher.crashed) == 1
        assert server.alive() and server.pid != crasher.crashed[0] and sp.accepts_connections(server.port)
        # The failed attempt's scratch folder is gone; only the running engine's is left.
        assert [d for d in (tmp_path / "scratch").iterdir() if d.name.startswith(sp.SCRATCH_PREFIX)] == [server.private_dir]
        text = caplog.text
        assert "killed by SIGABRT during start-up (attempt 1 of 3)" in text and "starting it again" in text, text
        assert "local Apache Spark engine started in" in text and "(attempt 2," in text, text
    finally:
        server.stop()
    assert not server.private_dir.exists()


def test_an_engine_that_keeps_crashing_at_start_up_is_given_up_after_three_attempts(tmp_path, monkeypatch):
    from delta_destination.errors import EngineUnavailable

    monkeypatch.setenv("DELTA_DESTINATION_SCRATCH", str(tmp_path / "scratch"))
    crasher = _JvmCrasher(signal.SIGKILL, times=sp.START_ATTEMPTS + 1)  # e.g. the kernel's OOM killer
    try:
        with pytest.raises(EngineUnavailable) as failed:
            sp.LocalSparkServer(sp.SparkProcessOptions(cores=2))
    finally:
        crasher.stop()
    assert isinstance(failed.value, sp.EngineStartCrashed) and failed.value.signal_name == "SIGKILL"
    assert f"during start-up (attempt {sp.START_ATTEMPTS} of {sp.START_ATTEMPTS})" in failed.value.message
    assert len(crasher.crashed) == sp.START_ATTEMPTS
    assert not [d for d in (tmp_path / "scratch").iterdir() if d.name.startswith(sp.SCRATCH_PREFIX)]


def test_a_cancelled_start_stops_the_jvm_and_removes_its_folder(tmp_path, monkeypatch):
    """EnginePool.stop() (a SIGTERM) cancels a start still waiting for the JVM to listen: under
    load that wait took over a minute, and the destination outlived the supervisor's patience."""
    import threading

    from delta_destination.errors import EngineUnavailable

    monkeypatch.setenv("DELTA_DESTINATION_SCRATCH", str(tmp_path / "scratch"))
    cancelled = threading.Event()
    cancelled.set()  # the JVM is spawned and cannot listen before the first look at the event
    engines_before = {p.pid for p in spark_jvms_below(os.getpid())}  # e.g. a shared engine of this worker
    with pytest.raises(EngineUnavailable, match="start was cancelled") as failed:
        sp.LocalSparkServer(sp.SparkProcessOptions(cores=2), cancelled=cancelled)
    assert not isinstance(failed.value, sp.EngineStartCrashed)  # not retried
    assert not [d for d in (tmp_path / "scratch").iterdir() if d.name.startswith(sp.SCRATCH_PREFIX)]
    assert {p.pid for p in spark_jvms_below(os.getpid())} <= engines_before


def test_no_child_process_of_the_project_runs_python_between_fork_and_exec():
    """Every door serves gRPC or runs threads; the rule holds for test helpers too, since
    they start children from a pytest process that runs gRPC clients and servers."""
    import ast

    offenders = []
    for folder in ("delta_destination", "testkit", "tests", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "_proto" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.Call):
                    continue
                if any(k.arg == "preexec_fn" for k in node.keywords) or ast.unparse(node.func) in ("os.fork", "os.forkpty"):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
