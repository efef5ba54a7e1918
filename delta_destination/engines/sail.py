"""Sail: embedded in this process, or as a child process for a warehouse of its own.

Sail 0.7.2 reads object-store settings and credentials only from its process environment,
and its credentials only once (the AWS SDK's default chain, kept for the process's life;
per-session settings are ignored). So:
- the embedded server (in this process, no JVM, starts in about a second) serves warehouses
  reached with this process's own storage settings (the AWS_* environment, or none);
- a warehouse whose settings say otherwise (another endpoint, other keys: a setup form, an
  Airbyte config) is served by a Sail server in a child process whose environment holds exactly
  those settings: one per distinct storage configuration, started on first use, dying with the
  destination (launcher.py), its environment readable only by its owner (never on its command
  line).
Both refuse to spill query data (plaintext rows) to temporary files.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Mapping

from .. import logs
from ..errors import EngineUnavailable
from ..frozen import is_frozen
from ..storage import StorageOptions
from . import launcher
from .spark_process import accepts_connections, free_loopback_port

log = logs.get(__name__)

# The embedded engine must never spill query data (plaintext customer rows) to temporary
# files: refuse spilling outright. Operators can override through the environment.
# Its own log lines go to stderr (stdout belongs to the door); keep them to warnings.
EMBEDDED_ENV = {"SAIL_RUNTIME__TEMPORARY_FILES__MAX_SIZE": "0", "RUST_LOG": "warn"}
AWS_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID",
                 "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ALLOW_HTTP", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
                 "AWS_PROFILE")
START_TIMEOUT = 60.0


def environment_storage(environ: Mapping[str, str] = os.environ) -> StorageOptions:
    """The storage settings this process's environment gives Sail."""
    return StorageOptions(endpoint=environ.get("AWS_ENDPOINT_URL", ""), region=environ.get("AWS_REGION", ""),
                          access_key_id=environ.get("AWS_ACCESS_KEY_ID", ""),
                          secret_access_key=environ.get("AWS_SECRET_ACCESS_KEY", ""),
                          session_token=environ.get("AWS_SESSION_TOKEN", ""))


def served_by_embedded(options: StorageOptions, environ: Mapping[str, str] = os.environ) -> bool:
    """Can the embedded server reach a warehouse with these settings? Yes when every setting
    given is what this process's environment already says (path style follows the endpoint).
    >>> served_by_embedded(StorageOptions(), {})
    True
    >>> served_by_embedded(StorageOptions(endpoint="http://a:1"), {"AWS_ENDPOINT_URL": "http://b:1"})
    False
    """
    env = environment_storage(environ)
    given = {"endpoint": options.endpoint, "region": options.region, "access_key_id": options.access_key_id,
             "secret_access_key": options.secret_access_key, "session_token": options.session_token}
    return all(not v or v == getattr(env, k) for k, v in given.items()) and options.path_style is not False


def sail_environment(options: StorageOptions, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A child Sail's environment: this process's without its AWS settings, plus `options`."""
    env = {k: v for k, v in environ.items() if k not in AWS_VARIABLES}
    env.update(EMBEDDED_ENV)
    env.update(options.environment())
    if options.endpoint or options.path_style is not None:
        env["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false" if options.effective_path_style else "true"
    return env


class EmbeddedSail:
    def __init__(self):
        from pysail.spark import SparkConnectServer

        for k, v in EMBEDDED_ENV.items():
            os.environ.setdefault(k, v)
        # object_store refuses plain HTTP unless told; an http:// endpoint (S3-compatible stores on
        # a private network) in the environment means it is wanted.
        if os.environ.get("AWS_ENDPOINT_URL", "").startswith("http://"):
            os.environ.setdefault("AWS_ALLOW_HTTP", "true")
        self._server = SparkConnectServer(ip="127.0.0.1", port=0)
        self._server.start(background=True)
        _host, port = self._server.listening_address
        self.url = f"sc://127.0.0.1:{port}"
        log.info("embedded Sail Spark Connect engine started")

    def alive(self) -> bool:
        return True

    def stop(self) -> None:
        self._server.stop()


class SailServerProcess:
    """Sail's Spark Connect server in a child process with its own storage environment."""

    def __init__(self, options: StorageOptions):
        if is_frozen():
            raise EngineUnavailable("a warehouse with its own storage settings needs Sail in a child process, which "
                                    "the single-file binary cannot start: give the settings in its environment (AWS_*)")
        started = time.monotonic()
        self.port = free_loopback_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "pysail", "spark", "server", "--ip", "127.0.0.1", "--port", str(self.port)]
        try:
            self._proc = launcher.spawn_owned(cmd, name="sail-engine", cwd=None, env=sail_environment(options),
                                              stdout=subprocess.DEVNULL)   # its lines can quote values
        except OSError as exc:
            raise EngineUnavailable(f"cannot start a Sail engine process ({type(exc).__name__})") from exc
        deadline = started + START_TIMEOUT
        while not accepts_connections(self.port):
            if self._proc.poll() is not None:
                raise EngineUnavailable(f"the Sail engine process exited with code {self._proc.returncode} at start-up")
            if time.monotonic() > deadline:
                self.stop()
                raise EngineUnavailable(f"the Sail engine process did not listen within {START_TIMEOUT:.0f}s")
            time.sleep(0.1)
        log.info(f"Sail engine process for a warehouse with its own storage settings started in "
                 f"{time.monotonic() - started:.1f}s (pid {self._proc.pid})")

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
                self._proc.kill()
                self._proc.wait()
