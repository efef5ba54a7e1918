"""Fivetran's log format: one JSON object per line on stdout,
{"level": INFO|WARNING|SEVERE, "message": ..., "message-origin": "sdk_destination"}.

Fivetran starts the binary with FIVETRAN_ACCOUNT_NAME and FIVETRAN_GROUP_NAME in its
environment, as context for log lines: every message ends with them
("... [fivetran_account_name: acme, fivetran_group_name: lake]"), trimmed, on one line.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Mapping

ACCOUNT_ENV, GROUP_ENV = "FIVETRAN_ACCOUNT_NAME", "FIVETRAN_GROUP_NAME"


def log_context(environ: Mapping[str, str]) -> str:
    """'fivetran_account_name: a, fivetran_group_name: g' (the parts that are set), or ''."""
    parts = []
    for key, label in ((ACCOUNT_ENV, "fivetran_account_name"), (GROUP_ENV, "fivetran_group_name")):
        value = " ".join((environ.get(key) or "").split())
        if value:
            parts.append(f"{label}: {value}")
    return ", ".join(parts)

_LEVELS = {logging.DEBUG: "INFO", logging.INFO: "INFO", logging.WARNING: "WARNING",
           logging.ERROR: "SEVERE", logging.CRITICAL: "SEVERE"}


class FivetranJsonHandler(logging.Handler):
    def __init__(self, stream=None, environ: Mapping[str, str] = os.environ):
        super().__init__()
        self._stream = stream
        self._write_lock = threading.Lock()
        context = log_context(environ)
        self._suffix = f" [{context}]" if context else ""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = json.dumps({"level": _LEVELS.get(record.levelno, "INFO"), "message": record.getMessage() + self._suffix,
                               "message-origin": "sdk_destination"})
            stream = self._stream or sys.stdout
            with self._write_lock:
                stream.write(line + "\n")
                stream.flush()
        except Exception:  # noqa: BLE001 - logging must never break a request
            self.handleError(record)
