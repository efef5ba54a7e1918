"""The real Conduit (built by scripts/build_conduit.sh into .tools/) running a pipeline into the
connector: for the end-to-end tests and the soak benchmark."""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def conduit_binary(timeout: float = 3600) -> str:
    """The Conduit binary, built (or found cached) by scripts/build_conduit.sh."""
    out = subprocess.run([str(ROOT / "scripts" / "build_conduit.sh")], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError("building Conduit failed: " + out.stderr[-3000:])
    return out.stdout.strip().splitlines()[-1]


class Conduit:
    """A `conduit run` of the pipelines in `yaml_text` (with ${DELTA_ROOT}, ${DELTA_ENGINE} and ${WORK}
    in its environment), our connector installed in its connectors folder."""

    def __init__(self, binary: str, work: Path, yaml_text: str, db: tuple = ("--db.type", "inmemory"),
                 run: int = 1, engine: str = "sail"):
        self.work = work
        if run == 1:
            (work / "connectors").mkdir(parents=True)
            (work / "pipelines").mkdir()
            launcher = subprocess.run([sys.executable, "-m", "delta_destination.doors.conduit.main", "install",
                                       str(work / "connectors")], capture_output=True, text=True, cwd=ROOT, check=True)
            assert launcher.stdout.strip() == str(work / "connectors" / "delta-lake")
            (work / "pipelines" / "pipeline.yaml").write_text(yaml_text)
        suffix = "" if run == 1 else f".{run}"
        self.log_path = work / f"conduit{suffix}.log"
        self.progress = work / f"progress{suffix}.json"
        env = {**os.environ, "DELTA_ROOT": str(work / "wh"), "WORK": str(work), "DELTA_ENGINE": engine,
               "CONDUIT_DELTA_PROGRESS_FILE": str(self.progress)}
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, "run", "--pipelines.path", str(work / "pipelines"), "--connectors.path", str(work / "connectors"),
             *db, "--api.enabled=false", "--log.level", "debug", "--log.format", "json",
             "--pipelines.exit-on-degraded=true", "--pipelines.error-recovery.max-retries", "0"],
            cwd=work, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def connector_pid(self, timeout: float = 120.0) -> int:
        """The pid of our connector process (a child of Conduit)."""
        import psutil

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for child in psutil.Process(self.proc.pid).children():
                try:
                    if "delta_destination.doors.conduit.main" in " ".join(child.cmdline()):
                        return child.pid
                except psutil.NoSuchProcess:
                    continue
            time.sleep(0.2)
        raise AssertionError("no connector process under Conduit")

    def oracle_lines(self) -> list[dict]:
        path = self.work / "oracle.jsonl"
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]

    def acked(self) -> int:
        try:
            return json.loads(self.progress.read_text())["acked"]
        except (OSError, ValueError):
            return 0

    def wait_for(self, n: int, timeout: float = 240.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log()[-4000:]
            if len(self.oracle_lines()) >= n and self.acked() >= n:
                return
            time.sleep(0.5)
        raise AssertionError(f"timeout: oracle {len(self.oracle_lines())}, acked {self.acked()}\n{self.log()[-4000:]}")

    def interrupt(self, timeout: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGINT)     # ONE SIGINT: graceful stop (Stop, drain acks, Teardown)
        try:
            return self.proc.wait(timeout)
        finally:
            self.close()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def replay_oracle(lines: list[dict]) -> dict:
    state: dict = {}
    for r in lines:
        key = base64.b64decode(r["key"]).decode()
        if r["operation"] == "delete":
            state.pop(key, None)
        elif r["operation"] in ("create", "update", "snapshot"):
            state[key] = {**state.get(key, {}), **r["payload"]["after"]}
        else:
            raise AssertionError(r["operation"])
    return state
