"""`write`: AirbyteMessages from stdin into Delta tables, states echoed once committed.

Records are buffered per stream, bounded by bytes over all streams. A commit (one per stream
with buffered records) happens when the buffer is full, when a state has waited
`flush_interval_seconds` (also while the input is silent, see `idle`), and at the end of the
input; the waiting states are echoed right after it. When the input turns out bad (a
malformed line, a record of an unknown stream, a record whose key cannot be written), the
records the last received state covers are still committed and that state echoed; what came
after it is dropped and the sync fails, so the next attempt resumes from that state.

A stream is finished (the overwrite swap) at the end of the input only if the sync did not
fail and the source did not report it INCOMPLETE (no status at all counts as complete,
as Airbyte's own destinations assume).
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Optional

from airbyte_protocol.models import AirbyteStateType, AirbyteStreamStatus, TraceType, Type

from ... import logs
from ...core.api import DeltaCore
from .stream_plans import StreamPlan
from .config import DestinationConfig
from .errors import ProtocolViolation, RecordRejected
from .protocol import parse_line
from .records import Record, check_identity, fit_size
from .states import StateLedger
from .tables import StreamTables

log = logs.get(__name__)


def _key(namespace: Optional[str], name: str) -> tuple:
    return (namespace or None, name)


class Sync:
    def __init__(self, core: DeltaCore, config: DestinationConfig, plans: dict[tuple, StreamPlan],
                 emit: Callable[[dict], None]):
        self.config = config
        self.plans = plans
        self.emit = emit
        self.tables = StreamTables(core, config.settings)
        self.ledger = StateLedger()
        self.buffers: dict[tuple, list[Record]] = {k: [] for k in plans}
        self.buffered_bytes = 0
        self.covered: dict[tuple, int] = {k: 0 for k in plans}  # buffered records the last state covers
        self.statuses: dict[tuple, str] = {}
        self.source_failed = False
        self.last_flush = time.monotonic()
        self.records = 0
        # Arrival order of records across attempts (see tables.py, coverage).
        self.seq_base = time.time_ns() // 1000
        self.states_received = 0

    def run(self, lines: Iterable[bytes]) -> None:
        for plan in self.plans.values():
            self.tables.prepare(plan)
        self.last_flush = time.monotonic()
        try:
            for lineno, line in enumerate(lines, start=1):
                if line.strip():
                    self._handle(line, lineno)
        except (ProtocolViolation, RecordRejected):
            self._salvage()
            raise
        self.flush()
        if self.source_failed:
            log.warning("the source reported an error: no stream is finished (overwrite keeps the old table)")
            return
        for key, plan in self.plans.items():
            if self.statuses.get(key, AirbyteStreamStatus.COMPLETE.value) == AirbyteStreamStatus.COMPLETE.value:
                self.tables.finish(plan)
            else:
                log.warning(f"{plan.display}: the source reported the stream {self.statuses[key]}; not finished")
        log.info(f"write done: {self.records} records")

    # ---- input ---------------------------------------------------------------------------------
    def _handle(self, line: bytes, lineno: int) -> None:
        raw, msg = parse_line(line, lineno)
        if msg.type == Type.RECORD:
            self._record(msg.record, len(line), lineno)
        elif msg.type == Type.STATE:
            self._state(raw, msg.state)
        elif msg.type == Type.TRACE:
            self._trace(msg.trace)
        # LOG, CONTROL and others: nothing for a destination to do.

    def _record(self, rec, size: int, lineno: int) -> None:
        key = _key(rec.namespace, rec.stream)
        plan = self.plans.get(key)
        if plan is None:
            raise ProtocolViolation(f"input line {lineno}: a record of stream {rec.stream!r}"
                                    f"{f' (namespace {rec.namespace!r})' if rec.namespace else ''}, "
                                    f"which the configured catalog does not have")
        changes = [c.model_dump(mode="json", exclude_none=True) for c in (rec.meta.changes or [])] if rec.meta else []
        record = Record(rec.data, rec.emitted_at, changes, size, self.seq_base + self.states_received)
        where = f"input line {lineno}"
        check_identity(plan, record, where)
        if size > self.config.max_record_bytes:
            fit_size(plan, record, self.config.max_record_bytes, where)
        self.buffers[key].append(record)
        self.buffered_bytes += record.size
        self.ledger.record(key)
        self.records += 1
        if self.buffered_bytes >= self.config.buffer_bytes or self._state_waited_too_long():
            self.flush()

    def _state(self, raw: dict, state) -> None:
        stream_key = None
        if state.type == AirbyteStateType.STREAM and state.stream is not None:
            d = state.stream.stream_descriptor
            stream_key = _key(d.namespace, d.name)
        self.ledger.received(raw, stream_key)
        self.states_received += 1
        self.covered = {k: len(v) for k, v in self.buffers.items()}
        # Nothing buffered: every record before it is committed already, echo at once.
        if not self.buffered_bytes or self._state_waited_too_long():
            self.flush()

    def idle(self) -> None:
        """No input for a while: a state that waited long enough is committed and echoed now."""
        if self._state_waited_too_long():
            self.flush()

    def _state_waited_too_long(self) -> bool:
        return bool(self.ledger.pending) and time.monotonic() - self.last_flush >= self.config.flush_interval_seconds

    def _trace(self, trace) -> None:
        if trace.type == TraceType.STREAM_STATUS and trace.stream_status is not None:
            d = trace.stream_status.stream_descriptor
            self.statuses[_key(d.namespace, d.name)] = trace.stream_status.status.value
        elif trace.type == TraceType.ERROR:
            self.source_failed = True

    # ---- commits -------------------------------------------------------------------------------
    def flush(self) -> None:
        """Commit every buffered record (one commit per stream), then echo waiting states."""
        for key, records in self.buffers.items():
            if records:
                self.tables.commit(self.plans[key], records)
                self.buffers[key] = []
        self.buffered_bytes = 0
        self.covered = {k: 0 for k in self.buffers}
        self.last_flush = time.monotonic()
        states = self.ledger.take()
        if states:
            for plan in self.plans.values():
                self.tables.mark_covered(plan, self.seq_base + self.states_received)
        for state in states:
            self.emit(state)

    def _salvage(self) -> None:
        """Bad input: commit what the last received state covers, echo the states, drop the rest."""
        for key in self.buffers:
            self.buffers[key] = self.buffers[key][: self.covered.get(key, 0)]
        if self.ledger.pending:
            self.flush()
