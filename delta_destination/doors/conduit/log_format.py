"""Logs for Conduit: go-plugin reads our stderr and re-logs each hclog JSON line
(`{"@level": "info", "@message": ...}`) at its level inside Conduit's own log. stdout is
reserved for the handshake line."""
from __future__ import annotations

import json
import logging

_LEVELS = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn", logging.ERROR: "error",
           logging.CRITICAL: "error"}
_FROM_CONDUIT = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
                 "error": logging.ERROR}


class HclogJsonHandler(logging.StreamHandler):
    def format(self, record: logging.LogRecord) -> str:
        level = _LEVELS.get(record.levelno, "info")
        return json.dumps({"@level": level, "@message": record.getMessage(), "@module": record.name})


def level_from(name: str) -> int:
    """CONDUIT_CONNECTOR_LOG_LEVEL (trace, debug, info, warn, error) as a logging level."""
    return _FROM_CONDUIT.get((name or "").strip().lower(), logging.INFO)
