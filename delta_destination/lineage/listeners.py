"""Listeners on the core's table operations (core/events.py). Each returns at once: the
commit log line is one log call; lineage events are built and queued, sent elsewhere."""
from __future__ import annotations

from typing import Optional

from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import RunState

from .. import logs
from ..errors import DestinationError
from ..core.events import TableEvent, TableOutcome
from .airflow_assets import AssetEvent
from .openlineage_events import run_event
from .sender import BackgroundSender
from .uris import UnusableLocation, location_uri

log = logs.get(__name__)


def event_uri(event: TableEvent) -> Optional[str]:
    """The table's canonical URI, or None when the operation names no single table location."""
    if not event.location:
        return None
    try:
        return location_uri(event.location, event.schema, event.table)
    except (UnusableLocation, DestinationError):
        return None


class CommitLog:
    """One line after every commit naming the table by its canonical URI and version."""

    def started(self, event: TableEvent) -> None:
        pass

    def completed(self, event: TableEvent, outcome: TableOutcome) -> None:
        if not outcome.committed:
            return
        uri = event_uri(event) or f"{event.schema}.{event.table}"
        version = f" at Delta version {outcome.version}" if outcome.version is not None else ""
        log.info(f"{event.operation} committed {uri}{version}")

    def failed(self, event: TableEvent, error: BaseException) -> None:
        pass


class OpenLineageListener:
    """START, then COMPLETE or FAIL, per operation; emitted by the client on the sender's thread."""

    def __init__(self, client: OpenLineageClient, job_namespace: str, capacity: int = 1000):
        self.client = client
        self.job_namespace = job_namespace
        self.sender: BackgroundSender = BackgroundSender("OpenLineage", client.emit, capacity)

    def started(self, event: TableEvent) -> None:
        if not event.working:
            self.sender.submit(run_event(RunState.START, event, self.job_namespace, event_uri(event)))

    def completed(self, event: TableEvent, outcome: TableOutcome) -> None:
        if not event.working:
            self.sender.submit(run_event(RunState.COMPLETE, event, self.job_namespace, event_uri(event), outcome))

    def failed(self, event: TableEvent, error: BaseException) -> None:
        if not event.working:
            self.sender.submit(run_event(RunState.FAIL, event, self.job_namespace, event_uri(event), error=error))

    def close(self, timeout: float) -> bool:
        drained = self.sender.close(timeout)
        try:
            self.client.close(timeout)
        except Exception:  # noqa: BLE001 - shutting down; lineage is best effort
            pass
        return drained


class AirflowListener:
    """An asset event for the table's URI after every commit."""

    def __init__(self, send, capacity: int = 1000):
        self.sender: BackgroundSender = BackgroundSender("Airflow asset events", send, capacity)

    def started(self, event: TableEvent) -> None:
        pass

    def completed(self, event: TableEvent, outcome: TableOutcome) -> None:
        uri = event_uri(event)
        if not outcome.committed or uri is None or event.working:
            return
        extra = {"operation": event.operation, "door": event.door, "openlineage_run_id": event.run_id}
        for key, value in (("delta_version", outcome.version), ("inserted", outcome.inserted),
                           ("updated", outcome.updated), ("deleted", outcome.deleted)):
            if value is not None:
                extra[key] = value
        self.sender.submit(AssetEvent(uri, extra))

    def failed(self, event: TableEvent, error: BaseException) -> None:
        pass

    def close(self, timeout: float) -> bool:
        return self.sender.close(timeout)
