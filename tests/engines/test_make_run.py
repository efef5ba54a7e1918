"""`make run` is what a user types: it must serve on the default engine (auto) and on the Spark
engine and pass the tester client.

The server is started exactly as documented (`make run`, `make run ENGINE=spark`) in its own
process group, and `python -m testkit.tester` -- a separate process, like Fivetran's tester --
drives it through input.json with encrypted zstd batch files and compares the Delta tables
read back with delta-rs against its reference model.
"""
from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from testkit.processes import spark_jvms_below
from testkit.server_process import ROOT, TESTER_INPUTS


@pytest.mark.parametrize("engine", ["auto", "spark"])
def test_make_run_serves_and_passes_the_tester_client(tmp_path, engine, dedicated_server):
    """auto: `make run` as it is (the tester's tables are small: Sail serves them, no JVM starts)."""
    warehouse = tmp_path / "warehouse"
    make_vars = [] if engine == "auto" else [f"ENGINE={engine}"]
    server = dedicated_server(warehouse, tmp_path / "server.log",
                              launcher=lambda port: ["make", "--no-print-directory", "run", f"PORT={port}",
                                                     f"WAREHOUSE={warehouse}", *make_vars])
    jvms = []
    try:
        jvms = spark_jvms_below(server.proc.pid)
        assert len(jvms) == (1 if engine == "spark" else 0)
        client = subprocess.run(
            [sys.executable, "-m", "testkit.tester", "--port", str(server.port), "--warehouse", str(warehouse),
             "--input", str(TESTER_INPUTS / "input.json"), "--schema", "tester"],
            cwd=ROOT, capture_output=True, text=True, timeout=1200)
        assert client.returncode == 0, client.stdout[-4000:] + client.stderr[-2000:]
        assert "RESULT: OK" in client.stdout
        assert len(spark_jvms_below(server.proc.pid)) == (1 if engine == "spark" else 0)
        log = server.log_text()
        label = "engine Apache Spark (local)" if engine == "spark" else "engine auto (embedded Sail; local Apache Spark"
        assert f"destination ready: warehouse {warehouse}, {label}" in log, log[:3000] + " ... " + log[-1500:]
        assert (warehouse / "tester").is_dir()
    finally:
        server.stop()
    # the JVM went with the server (SIGTERM to make's process group)
    gone, alive = psutil.wait_procs(jvms, timeout=30)
    assert not alive
    # ... and the destination finished its own shutdown (make gets the signal too, and exits first).
    deadline = time.time() + 30
    while "destination stopped" not in (tmp_path / "server.log").read_text() and time.time() < deadline:
        time.sleep(0.5)
    assert "destination stopped" in (tmp_path / "server.log").read_text()
