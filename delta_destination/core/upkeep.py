"""Table upkeep: compaction, purging deletion vectors, VACUUM.

Why: every sync adds small files, and MERGE/DELETE with deletion vectors leave files
whose rows are partly dead; readers slow down and storage grows. Fivetran's own lake
destinations compact and vacuum weekly. Upkeep runs on demand (`fivetran-delta-destination
maintain`) or periodically on idle tables inside the server (`--upkeep-interval-hours`).

Rules:
- Never concurrently with a write to the same table in this process: the table's lock
  is taken (periodic upkeep skips a busy table instead of waiting). Writers in other
  processes are covered by Delta's optimistic concurrency on the Spark engine.
- VACUUM keeps at least Delta's own safety window (7 days by default): a shorter
  retention is refused here, and Delta's retention check stays on.
- What the engine cannot do is reported per step with the reason, never silently skipped.
- Checkpoints are not a step: Delta on Spark writes one every 10 commits by itself
  (spark_process.py), and the upkeep commits count toward that.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Iterator, Optional

from .. import logs
from ..errors import InvalidRequest, TableNotFound, UnsupportedOperation
from ..settings import BY_KEY, Settings, default_of
from .delta_log import last_commit_time
from .registry import TableRegistry, TableRef
from .table_dirs import table_locations

log = logs.get(__name__)

# As the vacuum_retention_hours setting declares them (Delta's delta.deletedFileRetentionDuration; never
# below Delta's safety check).
DEFAULT_RETENTION_HOURS = int(default_of("vacuum_retention_hours"))
MIN_RETENTION_HOURS = int(BY_KEY["vacuum_retention_hours"].minimum)
STEPS = ("compact", "purge_deletion_vectors", "vacuum")


@dataclass(frozen=True)
class UpkeepOptions:
    retention_hours: int = DEFAULT_RETENTION_HOURS

    def __post_init__(self):
        if self.retention_hours < MIN_RETENTION_HOURS:
            raise InvalidRequest(
                f"VACUUM retention of {self.retention_hours} hours is below Delta's safety window of "
                f"{MIN_RETENTION_HOURS} hours: readers and a crashed writer may still need those files")


@dataclass
class UpkeepReport:
    table: str
    location: str
    done: list[str] = field(default_factory=list)
    unsupported: dict[str, str] = field(default_factory=dict)   # step -> why
    skipped: Optional[str] = None                                # the whole table, and why
    seconds: float = 0.0

    def summary(self) -> str:
        if self.skipped:
            return f"{self.table}: skipped ({self.skipped})"
        parts = [f"done: {', '.join(self.done) or 'nothing'}"]
        parts += [f"not available: {step} ({why})" for step, why in self.unsupported.items()]
        return f"{self.table}: " + "; ".join(parts) + f" in {self.seconds:.1f}s"


class Upkeep:
    def __init__(self, registry: TableRegistry):
        self.registry = registry

    def tables(self, settings: Settings, schema: Optional[str] = None, table: Optional[str] = None) -> Iterator[TableRef]:
        """The tables to look after: one, a schema's, or the whole (local) warehouse."""
        wh = self.registry.warehouse(settings)
        if schema and table:
            yield self.registry.locate(settings, schema, table)
            return
        if not wh.can_list:
            raise InvalidRequest("listing tables needs a warehouse the destination can list (a directory or an object store): "
                                 "name --schema and --table for other storage URLs")
        wanted = wh.schema_location(schema).rstrip("/") if schema else None
        for sdir, tdir, location in table_locations(wh):
            if wanted is None or wh.storage.parent(location) == wanted:
                yield TableRef(sdir, tdir, location, wh)

    def run(self, settings: Settings, ref: TableRef, options: UpkeepOptions, wait: bool = True) -> UpkeepReport:
        report = UpkeepReport(ref.display, ref.location)
        started = time.monotonic()
        lock = self.registry.lock(ref)
        # The engine first (a local Spark JVM may have to start): the table stays writable meanwhile.
        with self.registry.session(settings, upkeep=True) as eng:
            if not lock.acquire(blocking=wait):
                report.skipped = "a write is in progress"
                return report
            try:
                self._steps(eng, ref, options, report)
            finally:
                lock.release()
                self.registry.forget(ref)
        self.registry.mirror_committed(settings, ref)   # compaction, purge and vacuum are Delta commits too
        report.seconds = time.monotonic() - started
        log.info(f"upkeep {report.summary()}")
        return report

    def _steps(self, eng, ref: TableRef, options: UpkeepOptions, report: UpkeepReport) -> None:
        if not self.registry.exists(eng, ref):
            raise TableNotFound(f"table {ref.display} does not exist")
        steps = {
            "compact": lambda action: eng.compact(action, ref.location),
            "purge_deletion_vectors": lambda action: eng.purge_deletion_vectors(action, ref.location),
            "vacuum": lambda action: eng.vacuum(action, ref.location, options.retention_hours),
        }
        for step in STEPS:
            try:
                steps[step](f"{step.replace('_', ' ')} {ref.display}")
                report.done.append(step)
            except UnsupportedOperation as exc:
                report.unsupported[step] = exc.message


class PeriodicUpkeep:
    """Runs upkeep on idle tables every `interval_hours` in a background thread.

    A table is idle when its last commit is older than `idle_minutes` and no write holds
    its lock; busy tables wait for the next round.
    """

    def __init__(self, upkeep: Upkeep, settings: Settings, interval_hours: float, options: UpkeepOptions,
                 idle_minutes: float = default_of("upkeep_idle_minutes")):
        self.upkeep, self.settings, self.options = upkeep, settings, options
        self.interval = interval_hours * 3600
        self.idle_seconds = idle_minutes * 60
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="upkeep", daemon=True)

    def start(self) -> "PeriodicUpkeep":
        log.info(f"table upkeep every {self.interval / 3600:g} hours on tables idle for {self.idle_seconds / 60:g} minutes")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.run_once()
            except Exception as exc:  # noqa: BLE001 - upkeep never takes the server down
                log.warning(f"table upkeep round failed ({type(exc).__name__}); next round in {self.interval / 3600:g} hours")

    def run_once(self) -> list[UpkeepReport]:
        reports = []
        for ref in self.upkeep.tables(self.settings):
            if self._stop.is_set():
                break
            if time.time() - last_commit_time(ref.warehouse, ref.location) < self.idle_seconds:
                continue
            try:
                reports.append(self.upkeep.run(self.settings, ref, self.options, wait=False))
            except Exception as exc:  # noqa: BLE001 - one table's failure does not stop the round
                log.warning(f"upkeep of {ref.display} failed ({type(exc).__name__})")
        return reports


