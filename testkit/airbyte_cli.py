"""Driving the real `airbyte-delta-destination` command over pipes, as the Airbyte platform does: the
command, a `write` fed line by line, Airbyte protocol messages (catalog streams, records, states,
statuses) and the engine the Airbyte tests run on."""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import pytest

from testkit.server_process import ROOT

COMMAND = [sys.executable, "-m", "delta_destination.doors.airbyte.main"]


# Each Airbyte command starts its own engine, and a local Spark JVM takes ~15 s to start: the
# protocol tests run on embedded Sail; the tests marked with ON_BOTH_ENGINES (dedup through the
# raw protocol and through PyAirbyte) also run on the Spark engine.
ON_BOTH_ENGINES = pytest.mark.parametrize("engine", ["sail", "spark"], indirect=True)


@pytest.fixture(params=os.environ.get("DELTA_AIRBYTE_TEST_ENGINES", "sail").split(","))
def engine(request, door_process) -> str:
    """THE place the Airbyte tests take their engine from (DELTA_AIRBYTE_TEST_ENGINES=sail,spark
    runs every Airbyte test on both engines). Each `write` is a process with its own engine
    (`door_process`: the full tier)."""
    return request.param


@dataclass
class Result:
    rc: int
    lines: list[str]
    stderr: str

    @property
    def messages(self) -> list[dict]:
        return [json.loads(line) for line in self.lines]  # every stdout line must be JSON

    def of(self, kind: str) -> list[dict]:
        return [m for m in self.messages if m["type"] == kind]

    @property
    def states(self) -> list[dict]:
        return [m["state"] for m in self.of("STATE")]

    @property
    def errors(self) -> list[dict]:
        return [m["trace"]["error"] for m in self.of("TRACE") if m["trace"]["type"] == "ERROR"]


def run(args: list[str], stdin_lines: Iterable[str] = (), timeout: float = 300) -> Result:
    data = "".join(line if line.endswith("\n") else line + "\n" for line in stdin_lines).encode()
    p = subprocess.run(COMMAND + args, input=data, capture_output=True, cwd=ROOT, timeout=timeout)
    return Result(p.returncode, p.stdout.decode().splitlines(), p.stderr.decode(errors="replace"))


class Running:
    """A `write` whose stdin we feed line by line and whose stdout we watch as it goes."""

    def __init__(self, args: list[str]):
        self.proc = subprocess.Popen(COMMAND + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=ROOT)
        self.out: "queue.Queue[Optional[str]]" = queue.Queue()
        self.lines: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for raw in self.proc.stdout:
            self.out.put(raw.decode().rstrip("\n"))
        self.out.put(None)

    def send(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()

    def wait_for(self, predicate, timeout: float = 120) -> dict:
        """The first new stdout message matching predicate."""
        import time

        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                line = self.out.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                break
            if line is None:
                raise AssertionError("the destination exited while we waited")
            self.lines.append(line)
            msg = json.loads(line)
            if predicate(msg):
                return msg
        raise AssertionError("timed out waiting for a message")

    def close(self, timeout: float = 300) -> Result:
        self.proc.stdin.close()
        rc = self.proc.wait(timeout)
        while True:
            line = self.out.get(timeout=30)
            if line is None:
                break
            self.lines.append(line)
        return Result(rc, self.lines, "")


def write_json(path: Path, obj) -> str:
    path.write_text(json.dumps(obj))
    return str(path)


def stream(name: str, properties: dict, mode: str, pk=None, cursor=None, namespace=None, generation=None,
           minimum=None, sync_id=None) -> dict:
    s = {"stream": {"name": name, "json_schema": {"type": "object", "properties": properties},
                    "supported_sync_modes": ["full_refresh", "incremental"]},
         "sync_mode": "incremental" if mode != "overwrite" else "full_refresh", "destination_sync_mode": mode}
    if namespace:
        s["stream"]["namespace"] = namespace
    if pk:
        s["primary_key"] = [[k] for k in pk]
    if cursor:
        s["cursor_field"] = [cursor]
    for k, v in (("generation_id", generation), ("minimum_generation_id", minimum), ("sync_id", sync_id)):
        if v is not None:
            s[k] = v
    return s


def record(stream_name: str, data: dict, emitted_at: int = 1_700_000_000_000, namespace=None) -> str:
    r = {"stream": stream_name, "data": data, "emitted_at": emitted_at}
    if namespace:
        r["namespace"] = namespace
    return json.dumps({"type": "RECORD", "record": r})


def stream_state(stream_name: str, value, **extra) -> str:
    return json.dumps({"type": "STATE", "state": {"type": "STREAM", "stream": {
        "stream_descriptor": {"name": stream_name}, "stream_state": value}, **extra}})


def stream_status(stream_name: str, status: str) -> str:
    return json.dumps({"type": "TRACE", "trace": {"type": "STREAM_STATUS", "emitted_at": 1.0, "stream_status": {
        "stream_descriptor": {"name": stream_name}, "status": status}}})
