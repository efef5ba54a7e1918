"""A real Airflow 3 API server on loopback, from the test-only venv (scripts/airflow_test_venv.sh):
SQLite metadata DB, simple auth manager with one admin user, and a DAG folder whose DAGs are
scheduled on the asset URIs a test names (so those assets exist, as in production)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import requests

from .server_process import ROOT, free_port

VENV = ROOT / ".airflow-venv"

DAG_TEMPLATE = '''from airflow.sdk import Asset, dag, task


@dag(dag_id={dag_id!r}, schedule=[Asset({uri!r})])
def consumer():
    @task
    def noop():
        pass

    noop()


consumer()
'''


def ensure_venv() -> Path:
    subprocess.run(["bash", str(ROOT / "scripts" / "airflow_test_venv.sh")], check=True, cwd=ROOT, timeout=1800)
    return VENV / "bin" / "airflow"


class RealAirflow:
    def __init__(self, base: Path, asset_uris: list[str], username: str = "admin", password: str = "pw-lineage-1"):
        self.airflow = ensure_venv()
        self.home = base / "airflow-home"
        dags = base / "dags"
        self.home.mkdir(parents=True)
        dags.mkdir()
        for i, uri in enumerate(asset_uris):
            (dags / f"consumer_{i}.py").write_text(DAG_TEMPLATE.format(dag_id=f"consumer_{i}", uri=uri))
        (self.home / "passwords.json").write_text(json.dumps({username: password}))
        self.username, self.password = username, password
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OPENLINEAGE"))}
        self.env = {
            **env,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{username}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
        }
        self.log = open(base / "airflow.log", "ab")
        self.proc = None

    def _run(self, *args: str) -> None:
        subprocess.run([str(self.airflow), *args], env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                       check=True, timeout=300)

    def start(self) -> "RealAirflow":
        self._run("db", "migrate")
        self._run("dags", "reserialize")  # parses the DAGs: their assets now exist in the DB
        self.proc = subprocess.Popen([str(self.airflow), "api-server", "--host", "127.0.0.1", "--port", str(self.port)],
                                     env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"airflow api-server exited with {self.proc.returncode}")
            try:
                if requests.get(f"{self.url}/api/v2/monitor/health", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise RuntimeError("airflow api-server did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, **params) -> dict:
        token = requests.post(f"{self.url}/auth/token", json={"username": self.username, "password": self.password},
                              timeout=10).json()["access_token"]
        r = requests.get(f"{self.url}{path}", params=params, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        r.raise_for_status()
        return r.json()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: the server and its workers
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
