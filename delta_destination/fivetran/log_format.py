"""Fivetran's log format: one JSON object per line on stdout,
{"level": INFO|WARNING|SEVERE, "message": ..., "message-origin": "sdk_destination"}."""
from __future__ import annotations

import json
import logging
import sys
import threading

_LEVELS = {logging.DEBUG: "INFO", logging.INFO: "INFO", logging.WARNING: "WARNING",
           logging.ERROR: "SEVERE", logging.CRITICAL: "SEVERE"}


class FivetranJsonHandler(logging.Handler):
    def __init__(self, stream=None):
        super().__init__()
        self._stream = stream
        self._write_lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = json.dumps({"level": _LEVELS.get(record.levelno, "INFO"), "message": record.getMessage(),
                               "message-origin": "sdk_destination"})
            stream = self._stream or sys.stdout
            with self._write_lock:
                stream.write(line + "\n")
                stream.flush()
        except Exception:  # noqa: BLE001 - logging must never break a request
            self.handleError(record)
