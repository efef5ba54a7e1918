"""Lineage for every door: canonical dataset URIs, OpenLineage events, Airflow asset events.

A door wires it with ONE call after building its core, and closes it on shutdown:

    runtime = open_core("airbyte", options)      # doors/runtime.py: the core (its engines), metrics, and this
    lineage = delta_destination.lineage.attach(runtime.core)      # reads the environment
    ...
    lineage.close()

What `attach` installs (see docs/lineage.md):
- always: a log line after every commit naming the table by its canonical URI and version;
- OpenLineage events, when the client is configured its standard ways (`openlineage.yml`
  in the working directory or ~/.openlineage, `OPENLINEAGE_CONFIG`, `OPENLINEAGE_URL`,
  `OPENLINEAGE__TRANSPORT__*`), or by `openlineage_config=`; off otherwise, and never the
  console transport (it would write into the door's stdout protocol);
- Airflow asset events, when `DELTA_LINEAGE_AIRFLOW_URL` (or `airflow=`) is set.
Nothing here can fail or slow a write: events are queued (bounded) and sent by background
threads with timeouts; problems become WARNING lines.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .. import logs
from ..core.api import DeltaCore
from .airflow_assets import AirflowAssets, AirflowConfig
from .listeners import AirflowListener, CommitLog, OpenLineageListener
from .uris import OpenLineageName, openlineage_name, table_uri

__all__ = ["attach", "Lineage", "AirflowConfig", "table_uri", "openlineage_name", "OpenLineageName"]

log = logs.get(__name__)

QUEUE_ENV = "DELTA_LINEAGE_QUEUE_SIZE"
NAMESPACE_ENV = "OPENLINEAGE_NAMESPACE"  # the job namespace, as OpenLineage's integrations name it


@dataclass
class Lineage:
    """What attach() installed; close() sends what is queued (bounded) and stops the threads."""

    openlineage: Optional[OpenLineageListener] = None
    airflow: Optional[AirflowListener] = None
    listeners: list = field(default_factory=list)

    def flush(self, timeout: float = 5.0) -> bool:
        ok = True
        for part in (self.openlineage, self.airflow):
            if part is not None:
                ok = part.sender.flush(timeout) and ok
        return ok

    def close(self, timeout: float = 5.0) -> bool:
        ok = True
        for part in (self.openlineage, self.airflow):
            if part is not None:
                ok = part.close(timeout) and ok
        return ok


def _openlineage_configured(config: Optional[dict]) -> bool:
    """The client's own configuration sources (it would fall back to the console otherwise)."""
    if os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if config or os.environ.get("OPENLINEAGE_URL") or os.environ.get("OPENLINEAGE_CONFIG"):
        return True
    if any(k.startswith("OPENLINEAGE__") for k in os.environ):
        return True
    return any(p.is_file() for p in (Path.cwd() / "openlineage.yml", Path.home() / ".openlineage" / "openlineage.yml"))


def _writes_to_console(transport: Any) -> bool:
    if getattr(transport, "kind", None) == "console":
        return True
    if getattr(transport, "kind", None) == "composite":
        return any(_writes_to_console(t) for t in transport.transports)
    return False


def _silence_client_logs() -> None:
    """The client's own log lines can carry endpoint URLs and go to stderr through Python's
    last-resort handler; the door decides where lines go, and our sender reports failures."""
    client_log = logging.getLogger("openlineage")
    if not any(isinstance(h, logging.NullHandler) for h in client_log.handlers):
        client_log.addHandler(logging.NullHandler())
    client_log.propagate = False


def _openlineage_listener(door: str, config: Optional[dict], capacity: int) -> Optional[OpenLineageListener]:
    if not _openlineage_configured(config):
        return None
    _silence_client_logs()
    from openlineage.client import OpenLineageClient
    from openlineage.client.event_v2 import set_producer

    from .openlineage_events import PRODUCER

    try:
        client = OpenLineageClient(config=config) if config else OpenLineageClient()
        transport = client.transport
        if transport is None or transport.kind == "noop":
            return None
        if _writes_to_console(transport):
            log.warning("OpenLineage: the console transport would write into this process's stdout protocol; "
                        "lineage events are off (configure a file or http transport)")
            return None
    except Exception as exc:  # noqa: BLE001 - bad lineage config never stops the destination
        log.warning(f"OpenLineage: the client configuration could not be used ({type(exc).__name__}); events are off")
        return None
    set_producer(PRODUCER)
    namespace = os.environ.get(NAMESPACE_ENV) or f"{door}-delta"
    log.info(f"OpenLineage: events on ({transport.kind} transport), job namespace {namespace}")
    return OpenLineageListener(client, namespace, capacity)


def attach(core: DeltaCore, *, openlineage_config: Optional[dict] = None,
           airflow: Optional[AirflowConfig] = None) -> Lineage:
    """Hang lineage off `core`'s operation events (call once per core, before serving)."""
    capacity = int(os.environ.get(QUEUE_ENV) or 1000)
    lineage = Lineage()
    lineage.listeners.append(CommitLog())
    lineage.openlineage = _openlineage_listener(core.events.door, openlineage_config, capacity)
    if lineage.openlineage is not None:
        lineage.listeners.append(lineage.openlineage)
    airflow = airflow or AirflowConfig.from_env(os.environ)
    if airflow is not None:
        lineage.airflow = AirflowListener(AirflowAssets(airflow).send, capacity)
        lineage.listeners.append(lineage.airflow)
        log.info("Airflow asset events on")  # not the URL: it may hold credentials
    core.events.listeners.extend(lineage.listeners)
    return lineage
