"""What the object-store servers of the tests and manual runs (s3_server.py, azure_server.py,
gcs_server.py) share: one child process on loopback with a data directory private to this user,
spawned with no Python between fork and exec (the tests run gRPC threads; launcher.py sets the
death signal after exec, so the server dies with the thread that started it), in a process group
of its own (a terminal's Ctrl-C reaches the tests, which stop the server in order), ready once a
probe of the server's own kind succeeds, stopped with SIGTERM then SIGKILL after a grace, and its
directory removed. Each server module adds its command line, its probe and what clients need."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from delta_destination.engines import launcher


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmulatorProcess:
    """The life cycle of one server process; subclasses set `title`, `log_name` and `error`."""

    title = "the server"                      # in messages: "<title> exited with code 1: ..."
    log_name = "server.log"                   # its stdout and stderr, in its data directory
    error: type[RuntimeError] = RuntimeError  # what a failed start raises

    def __init__(self, *, startup_timeout: float, stop_grace: float):
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.data_dir: Optional[Path] = None
        self.started_in: Optional[float] = None   # seconds from spawn to ready
        self._proc: Optional[subprocess.Popen] = None
        self._spawned_at = 0.0

    def _private_dir(self, prefix: str) -> Path:
        self.data_dir = Path(tempfile.mkdtemp(prefix=prefix))
        os.chmod(self.data_dir, 0o700)
        return self.data_dir

    def _spawn(self, cmd: list[str], env: dict[str, str]) -> None:
        if self._proc is not None:
            raise self.error("already started")
        self._spawned_at = time.monotonic()
        with open(self.data_dir / self.log_name, "ab") as log:
            self._proc = subprocess.Popen(launcher.command(cmd), cwd=self.data_dir, env=env, stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT, process_group=0)

    def _wait_until(self, ready: Callable[[], None], what: str, errors: tuple[type[BaseException], ...]) -> None:
        """Calls `ready` until it returns (ready) or the start-up time is over; `errors` are the
        answers of a server that is not ready yet."""
        deadline = self._spawned_at + self.startup_timeout
        last: Optional[BaseException] = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise self.error(f"{self.title} exited with code {self._proc.returncode} during start-up: "
                                 f"{self.log_tail()}")
            try:
                ready()
                self.started_in = time.monotonic() - self._spawned_at
                return
            except errors as exc:
                last = exc
                time.sleep(0.1)
        raise self.error(f"{self.title} did not {what} within {self.startup_timeout:.0f}s "
                         f"({type(last).__name__}): {self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM, SIGKILL after `stop_grace` seconds, then remove everything it made."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.stop_grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    def start(self):
        raise NotImplementedError

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return (self.data_dir / self.log_name).read_text(errors="replace")[-chars:]
        except (OSError, TypeError):
            return ""
