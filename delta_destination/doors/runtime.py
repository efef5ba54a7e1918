"""One door's process: its core (with its engines), lineage and metrics, opened and closed in one place.

Every door (Fivetran's server, an Airbyte run, a Conduit connector) needs the same things
wired the same way, so each calls `open_core` once and `close` at its end:

    runtime = open_core("airbyte", options)       # options: settings.Runtime from the door's config
    runtime.core.writer.write(...)
    runtime.close()

The core makes its own engines from the options (DeltaCore.open): a door holds no engine pool
or router, and asks the core for what it needs of its engines (start-up, health, setup tests).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from .. import lineage, metrics
from ..core.api import DeltaCore
from ..settings import Runtime


@dataclass
class DoorRuntime:
    core: DeltaCore
    lineage: lineage.Lineage
    metrics_port: Optional[int] = None   # where /metrics is served (None: off)

    def close(self, lineage_timeout: float = 5.0) -> None:
        """Stop every engine process (a start in progress is cancelled), then send the queued
        lineage events (bounded by `lineage_timeout`)."""
        try:
            self.core.stop_engines()
        finally:
            self.lineage.close(timeout=lineage_timeout)


def open_core(door: str, options: Runtime, working_table: Optional[Callable[[str, str], bool]] = None) -> DoorRuntime:
    """The core of a door's process. `working_table`: the door's own working tables, which
    lineage leaves out (Airbyte's overwrite staging)."""
    core = DeltaCore.open(door, options)
    if working_table is not None:
        core.events.working_table = working_table
    core.events.listeners.append(metrics.CommitMetrics())
    events = lineage.attach(core)   # commit log lines with URIs; OpenLineage/Airflow when configured
    port = metrics.serve(options.metrics_port)
    return DoorRuntime(core, events, port)
