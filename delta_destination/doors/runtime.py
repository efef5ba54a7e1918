"""One door's process: its engines, its core, lineage and metrics, opened and closed in one place.

Every door (Fivetran's server, an Airbyte run, a Conduit connector) needs the same things
wired the same way, so each calls `open_core` once and `close` at its end:

    runtime = open_core("airbyte", options)       # options: settings.Runtime from the door's config
    runtime.core.writer.write(...)
    runtime.close()
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from .. import lineage, metrics
from ..core.api import DeltaCore
from ..engines.pool import EnginePool
from ..engines.router import EngineRouter
from ..engines.supervisor import RecyclePolicy
from ..settings import Runtime

MIB = 2**20


def recycle_policy(options: Runtime, door: str) -> RecyclePolicy:
    """
    >>> recycle_policy(Runtime(engine_max_memory_mb=512, engine_max_requests=0), "fivetran").max_memory_bytes // 2**20
    512
    >>> p = recycle_policy(Runtime(), "conduit")
    >>> p.derived, p.headroom_bytes // 2**20, p.max_memory_bytes // 2**20
    (True, 256, 1024)
    >>> recycle_policy(Runtime(), "fivetran").derived
    False
    """
    return RecyclePolicy(max_memory_bytes=int(options.engine_memory_bound_mb(door) * MIB),
                         max_requests=int(options.engine_max_requests),
                         headroom_bytes=int(options.engine_memory_headroom(door) * MIB))


@dataclass
class DoorRuntime:
    engines: EnginePool
    core: DeltaCore
    lineage: lineage.Lineage
    metrics_port: Optional[int] = None   # where /metrics is served (None: off)

    def close(self, lineage_timeout: float = 5.0) -> None:
        """Stop every engine process (a start in progress is cancelled), then send the queued
        lineage events (bounded by `lineage_timeout`)."""
        try:
            self.engines.stop()
        finally:
            self.lineage.close(timeout=lineage_timeout)


def open_core(door: str, options: Runtime, working_table: Optional[Callable[[str, str], bool]] = None) -> DoorRuntime:
    """The core of a door's process. `working_table`: the door's own working tables, which
    lineage leaves out (Airbyte's overwrite staging)."""
    engines = EnginePool(idle_minutes=options.spark_idle_minutes, recycle=recycle_policy(options, door))
    core = DeltaCore(EngineRouter(engines), door=door, compact_small_files=options.compact_small_files)
    if working_table is not None:
        core.events.working_table = working_table
    core.events.listeners.append(metrics.CommitMetrics())
    events = lineage.attach(core)   # commit log lines with URIs; OpenLineage/Airflow when configured
    port = metrics.serve(options.metrics_port)
    return DoorRuntime(engines, core, events, port)
