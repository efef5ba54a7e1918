"""AirbyteMessages in and out, with Airbyte's own protocol models (airbyte-protocol-models-pdv2).

Input lines are validated by the models; STATE messages are echoed from the line's own
JSON (not re-serialized from a model), so every field -- unknown ones like the platform's
`id` included -- goes back exactly as received, plus `destinationStats.recordCount`.
Output goes to a private copy of the process's stdout; file descriptor 1 itself is pointed
at stderr, so nothing else (an engine, a library) can write a non-protocol line to stdout.
"""
from __future__ import annotations

import json
import logging
import os
import select
import sys
import threading
import time
import traceback
from typing import Any, Callable, Iterator, Optional

from airbyte_protocol.models import AirbyteMessage

from .errors import ProtocolViolation


def parse_line(line: bytes, lineno: int) -> tuple[dict, AirbyteMessage]:
    """(the raw JSON object, the validated message) of one input line."""
    try:
        raw = json.loads(line)
    except ValueError:
        if not line.endswith(b"\n"):
            # The input ended in the middle of a message (the source or the platform is gone): the
            # cut-off message is never applied, and neither is anything its last state does not cover.
            raise ProtocolViolation(f"input line {lineno} ends without a newline and is not JSON: the input "
                                    f"stopped in the middle of a message") from None
        raise ProtocolViolation(f"input line {lineno} is not JSON") from None
    if not isinstance(raw, dict):
        raise ProtocolViolation(f"input line {lineno} is not a JSON object")
    try:
        return raw, AirbyteMessage.model_validate(raw)
    except Exception as exc:  # pydantic's ValidationError quotes the input: never shown
        fields = _bad_fields(exc)
        raise ProtocolViolation(f"input line {lineno} is not a valid AirbyteMessage{fields}") from None


def read_lines(stream, idle_seconds: float, on_idle: Callable[[], None]) -> Iterator[bytes]:
    """The lines of a binary stream (a pipe or a file), calling `on_idle()` whenever nothing
    arrived for `idle_seconds` -- so a state can be committed and echoed while a source is
    silent. Reads the file descriptor directly (never mix with other reads of `stream`)."""
    fd = stream.fileno()
    buf = bytearray()
    while True:
        ready, _, _ = select.select([fd], [], [], idle_seconds)
        if not ready:
            on_idle()
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        buf += chunk
        start = 0
        while (end := buf.find(b"\n", start)) >= 0:
            yield bytes(buf[start:end + 1])
            start = end + 1
        del buf[:start]
    if buf:
        yield bytes(buf)


def _bad_fields(exc: Exception) -> str:
    try:
        locs = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})  # type: ignore[attr-defined]
        return f" (fields: {', '.join(locs[:5])})" if locs else ""
    except Exception:  # noqa: BLE001
        return ""


def now_ms() -> int:
    return int(time.time() * 1000)


def spec_message(spec: dict) -> dict:
    return {"type": "SPEC", "spec": spec}


def connection_status(ok: bool, message: Optional[str] = None) -> dict:
    status: dict[str, Any] = {"status": "SUCCEEDED" if ok else "FAILED"}
    if message:
        status["message"] = message
    return {"type": "CONNECTION_STATUS", "connectionStatus": status}


def trace_error(message: str, failure_type: str, internal: str, exc: Optional[BaseException] = None) -> dict:
    error: dict[str, Any] = {"message": message, "internal_message": internal, "failure_type": failure_type}
    if exc is not None:
        # Frames only: an exception's text can quote a value, its traceback frames cannot.
        error["stack_trace"] = "".join(traceback.format_tb(exc.__traceback__)) + type(exc).__name__
    return {"type": "TRACE", "trace": {"type": "ERROR", "emitted_at": float(now_ms()), "error": error}}


def log_message(level: str, message: str) -> dict:
    return {"type": "LOG", "log": {"level": level, "message": message}}


class Output:
    """The protocol channel: one JSON message per line, written whole under a lock."""

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()

    @classmethod
    def take_stdout(cls) -> "Output":
        sys.stdout.flush()
        fd = os.dup(1)
        os.dup2(2, 1)  # fd 1 (and print()) now goes to stderr
        sys.stdout = sys.stderr
        return cls(os.fdopen(fd, "w", encoding="utf-8", buffering=1))

    def write(self, message: dict) -> None:
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


_LEVELS = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN", logging.ERROR: "ERROR",
           logging.CRITICAL: "FATAL"}


class LogHandler(logging.Handler):
    """The package's log lines as Airbyte LOG messages."""

    def __init__(self, out: Output):
        super().__init__()
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.out.write(log_message(_LEVELS.get(record.levelno, "INFO"), record.getMessage()))
        except Exception:  # noqa: BLE001 - logging never fails the sync
            pass
