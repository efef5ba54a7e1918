"""Records in, acks out, in exactly the order received, each only after its Delta commit.

The Run stream's reader appends records; ONE writer thread takes batches (full, or the delay
since the first waiting record has passed, or the buffer is full, or a flush asked by Stop),
applies them and queues their acks; the Run stream sends the queue in order. One writer means
the acks cannot pass each other and the commits of one table happen in arrival order.

Backpressure: at most `max_records` records and `max_bytes` bytes wait (one record more than
that only when it alone is larger). While the buffer is full `receive` blocks, so the reader
stops reading the stream and gRPC's flow control makes Conduit wait: memory stays bounded
whatever the backlog.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from ... import logs

log = logs.get(__name__)


@dataclass(frozen=True)
class Ack:
    position: bytes
    error: str = ""          # empty = written; otherwise the nack's message


# process(records) -> one Ack per record, same order; must not raise.
Processor = Callable[[list], list[Ack]]


class Pipeline:
    def __init__(self, process: Processor, batch_size: int, batch_delay: float, max_records: int, max_bytes: int,
                 on_acked: Optional[Callable[[int], None]] = None):
        self.process = process
        self.batch_size = batch_size
        self.batch_delay = batch_delay
        self.max_records = max(1, max_records)
        self.max_bytes = max(1, max_bytes)
        self.on_acked = on_acked
        self.acks: "queue.Queue[Optional[list[Ack]]]" = queue.Queue()
        self._cond = threading.Condition()
        self._pending: list = []
        self._sizes: list[int] = []       # bytes of each pending record
        self._pending_bytes = 0
        self.peak_records = 0             # most records ever waiting at once
        self.peak_bytes = 0
        self._first_at = 0.0
        self._received = 0          # records received so far
        self._taken = 0             # records handed to the writer
        self._done = 0              # records whose acks are queued
        self._last_position: Optional[bytes] = None
        self._flush_to = 0          # flush everything up to this count now (Stop)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="conduit-writer", daemon=True)
        self._thread.start()

    # ---- the Run stream's side -----------------------------------------------------------------
    def receive(self, records) -> bool:
        """Blocks while the buffer is full (the caller, the Run stream's reader, then reads
        nothing, which is what holds Conduit back). False once the pipeline is closed: the
        records were not taken and the reader should stop."""
        sizes = [r.ByteSize() for r in records]
        with self._cond:
            while not self._closed and self._pending and self._full():
                self._cond.wait()
            if self._closed:
                return False
            if not self._pending:
                self._first_at = time.monotonic()
            self._pending.extend(records)
            self._sizes.extend(sizes)
            self._pending_bytes += sum(sizes)
            self.peak_records = max(self.peak_records, len(self._pending))
            self.peak_bytes = max(self.peak_bytes, self._pending_bytes)
            self._received += len(records)
            if records:
                self._last_position = bytes(records[-1].position)
            self._cond.notify_all()
        return True

    def _full(self) -> bool:
        return len(self._pending) >= self.max_records or self._pending_bytes >= self.max_bytes

    def idle(self) -> bool:
        """Nothing waiting and nothing being written."""
        with self._cond:
            return not self._pending and self._done == self._taken

    # ---- Stop and Teardown -----------------------------------------------------------------------
    def flush_through(self, last_position: bytes, wait_for_record: float, wait_for_flush: float) -> bool:
        """Wait until the record at `last_position` arrived (Stop races the stream), write and ack
        everything received, then return. False when the record did not arrive in time (what
        arrived is still flushed)."""
        arrived = True
        deadline = time.monotonic() + wait_for_record
        with self._cond:
            while last_position and self._last_position != last_position and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    arrived = False
                    break
                self._cond.wait(left)
            self._flush_to = self._received
            self._cond.notify_all()
            deadline = time.monotonic() + wait_for_flush
            while self._done < self._flush_to and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return arrived

    def abandon(self) -> int:
        """No more records and no more batches: records still waiting are dropped unacked (Conduit
        sends them again to the next connector), a blocked `receive` returns False, and the
        batch being written meets the guard. Returns how many records were dropped."""
        with self._cond:
            self._closed = True
            dropped = len(self._pending)
            self._pending.clear()
            self._sizes.clear()
            self._pending_bytes = 0
            self._cond.notify_all()
        return dropped

    def close(self, timeout: float = 60.0) -> int:
        """`abandon`, then wait for the batch being written (its commit is atomic) and end the
        ack stream. Returns how many records were dropped."""
        dropped = self.abandon()
        self.wait_writer(timeout)
        self.acks.put(None)
        return dropped

    def wait_writer(self, timeout: float) -> bool:
        """After `abandon`: True when the writer thread has ended within `timeout`."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # ---- the writer thread ---------------------------------------------------------------------
    def _ready(self, now: float) -> bool:
        n = len(self._pending)
        if n == 0:
            return False
        if self._taken < self._flush_to or self._full():
            return True
        if self.batch_size and n >= self.batch_size:
            return True
        if self.batch_delay:
            return now - self._first_at >= self.batch_delay
        return not self.batch_size      # size and delay both 0: every record on its own

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._ready(time.monotonic()):
                    wait = None
                    if self._pending and self.batch_delay:
                        wait = max(0.0, self._first_at + self.batch_delay - time.monotonic())
                    self._cond.wait(wait)
                if self._closed:
                    return
                n = len(self._pending)
                if self.batch_size:
                    n = min(n, self.batch_size)
                elif not self.batch_delay and self._taken >= self._flush_to:
                    n = 1
                batch = self._pending[:n]
                del self._pending[:n]
                self._pending_bytes -= sum(self._sizes[:n])
                del self._sizes[:n]
                self._first_at = time.monotonic()
                self._taken += n
                self._cond.notify_all()           # room in the buffer: a blocked receive goes on
            try:
                acks = self.process(batch)
            except Exception as exc:  # noqa: BLE001 - a bug must nack the batch, not hang the stream
                log.error(f"a batch of {len(batch)} records failed unexpectedly ({type(exc).__name__})")
                acks = [Ack(bytes(r.position), f"unexpected {type(exc).__name__}; the batch was not written")
                        for r in batch]
            self.acks.put(acks)
            with self._cond:
                self._done += len(batch)
                done = self._done
                self._cond.notify_all()
            if self.on_acked is not None:
                self.on_acked(done)
