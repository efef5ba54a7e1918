"""Sail engine processes: the environment each one gets, and starting and stopping one.

Sail 0.7.2 reads object-store settings and credentials only from its process environment,
and its credentials only once (the AWS SDK's default chain, kept for the process's life;
per-session settings are ignored). So every distinct storage configuration gets Sail
processes of its own (supervisor.py keeps one running per configuration and replaces it
when it must): the configuration of this process's own environment (the AWS_* variables,
or none), and each one a request's settings give otherwise (a setup form, an Airbyte
config), whose values go into that child's environment, readable only by its owner and
never on a command line.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from typing import Mapping, Optional

from .. import logs
from ..errors import EngineUnavailable
from ..frozen import is_frozen
from ..storage import StorageOptions, stores
from . import launcher
from .sail_engine import ENGINE_ENV, RETURNING_ALLOCATOR_ENV, SUB_COMMAND

log = logs.get(__name__)

START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0


def served_by_environment(options: StorageOptions, environ: Mapping[str, str] = os.environ) -> bool:
    """Does this process's own environment reach a warehouse with these settings? Yes when, for
    every store, each setting given is what the environment already says (storage/stores.py).
    >>> from delta_destination.storage import S3Options
    >>> served_by_environment(StorageOptions(), {})
    True
    >>> served_by_environment(StorageOptions(s3=S3Options(endpoint="http://a:1")), {"AWS_ENDPOINT_URL": "http://b:1"})
    False
    """
    return stores.served_by_environment(options, environ)


def storage_identity(options: StorageOptions, environ: Mapping[str, str] = os.environ) -> str:
    """Which Sail processes serve these settings: "" for this process's own environment."""
    return "" if served_by_environment(options, environ) else options.identity()


def sail_environment(options: StorageOptions, environ: Mapping[str, str] = os.environ,
                     returning_allocator: bool = False) -> dict[str, str]:
    """A Sail process's environment: this process's own where it serves the settings, else
    this process's with each store's variables replaced by `options` (Sail reads object_store's
    variables, AWS_* and AZURE_*, from its environment only). `returning_allocator`: its allocator
    gives freed memory back at once (sail_engine.RETURNING_ALLOCATOR_ENV).
    >>> from delta_destination.storage import S3Options
    >>> env = sail_environment(StorageOptions(s3=S3Options(endpoint="http://s3:1")), {"AWS_REGION": "x", "HOME": "/h"})
    >>> env["AWS_ENDPOINT_URL"], env["AWS_ALLOW_HTTP"], "AWS_REGION" in env, env["HOME"]
    ('http://s3:1', 'true', False, '/h')
    """
    env = stores.sail_environment(options, environ)
    for key, value in {**ENGINE_ENV, **(RETURNING_ALLOCATOR_ENV if returning_allocator else {})}.items():
        env.setdefault(key, value)
    return env


def engine_command(parent: int) -> list[str]:
    """How this installation starts a Sail engine process: the single-file binary runs itself
    with the sub-command (main.py), a normal installation the module."""
    if is_frozen():
        return [sys.executable, SUB_COMMAND, "--parent", str(parent)]
    return [sys.executable, "-m", "delta_destination.engines.sail_engine", "--parent", str(parent)]


def exit_description(code: Optional[int]) -> str:
    """
    >>> exit_description(-9), exit_description(3), exit_description(None)
    ('was killed by SIGKILL', 'exited with code 3', 'is running')
    """
    if code is None:
        return "is running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def resident_bytes(pid: int) -> Optional[int]:
    """The process's resident set (VmRSS; Linux /proc), None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class SailProcess:
    """One Sail engine process (sail_engine.py): started, listening on loopback, stopped."""

    def __init__(self, env: dict[str, str], start_timeout: float = START_TIMEOUT):
        started = time.monotonic()
        try:
            # Self-owned: the engine asks for its own death signal first thing (it can be the
            # single-file binary, which cannot run launcher.py); its stderr is discarded, since
            # engine messages can quote values.
            self._proc = launcher.spawn_owned(engine_command(os.getpid()), name="sail-engine", cwd=None, env=env,
                                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, self_owned=True)
        except OSError as exc:
            raise EngineUnavailable(f"cannot start a Sail engine process ({type(exc).__name__})") from exc
        try:
            self.port = self._read_port(started + start_timeout)
        except BaseException:
            self.stop()
            raise
        self.url = f"sc://127.0.0.1:{self.port}"
        self.started_at = time.monotonic()
        self.start_seconds = self.started_at - started

    def _read_port(self, deadline: float) -> int:
        out = self._proc.stdout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise EngineUnavailable(f"the Sail engine process did not listen within {START_TIMEOUT:.0f}s")
            ready, _, _ = select.select([out], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(out.fileno(), 64)
                if not chunk:
                    code = self._proc.wait()
                    raise EngineUnavailable(f"the Sail engine process {exit_description(code)} at start-up")
                line += chunk
        out.close()
        try:
            return int(line.strip())
        except ValueError:
            raise EngineUnavailable("the Sail engine process did not say its port") from None

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    @property
    def how_it_ended(self) -> str:
        return exit_description(self._proc.poll())

    def resident_bytes(self) -> Optional[int]:
        return resident_bytes(self._proc.pid) if self.alive() else None

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
