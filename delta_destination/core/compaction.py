"""Compaction of small files, by the destination itself (delta-rs), as they pile up.

Why: every commit of a small batch adds at least one small Parquet file, and the embedded
engine's MERGE reads every live file of its table. A Conduit stream of ~5-record commits left
400 files after 2,000 records, and a fresh Sail process then passed 400 MiB within 20 requests
(docs/benchmarks.md, "Soak notes"): memory and MERGE time grew with the number of commits.
Sail cannot OPTIMIZE, and periodic upkeep (on Spark) waits for idle tables, which a stream never
is. So once a table holds `min_small_files` small files, a background worker rewrites them into
bigger ones with delta-rs's `optimize.compact`:

- a commit with dataChange=false: what a reader sees does not change (Delta's own OPTIMIZE);
  it is not a request's commit, and a request's "one request, one commit" is untouched;
- under the table's lock, after the request that crossed the threshold has answered: no
  request of this process writes the table meanwhile; writers in other processes meet Delta's
  optimistic concurrency (delta-rs checks the files it rewrote against commits made since, and
  fails the compaction, never their commit);
- only tables whose protocol delta-rs writes as it is: reader version 1 and writer version 2 or
  below without table features (what Sail creates), or deletion vectors as their only feature
  (what big tables get, core/write_plan.py deletion_vectors_first). Tables with column mapping (what
  Spark creates here) are left to upkeep on Spark (core/upkeep.py);
- a failure is logged once per table and the table is not tried again by this process (e.g. a
  store where delta-rs has no safe commit), so a stream is never slowed by retries.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Optional

from .. import logs
from .delta_log import has_commits, open_table

log = logs.get(__name__)

MIB = 2**20


@dataclass(frozen=True)
class CompactionPolicy:
    """When and how far small files are compacted (min_small_files 0: never)."""

    min_small_files: int = 0
    # Files below this are small, and compaction writes files up to this size: the door process
    # holds about one such bin of Arrow data at a time (one task), which keeps its memory small.
    target_bytes: int = 16 * MIB

    def due(self, sizes: list[int]) -> bool:
        """
        >>> CompactionPolicy(3).due([10, 20, 30]), CompactionPolicy(3).due([10, 20, 64 * MIB])
        (True, False)
        >>> CompactionPolicy(0).due([1] * 100)
        False
        """
        return self.min_small_files > 0 and sum(1 for s in sizes if s < self.target_bytes) >= self.min_small_files


# Table features delta-rs 1.6.6 keeps when it compacts: deletion vectors (it applies a file's vector
# while rewriting it: the same rows before and after, tests/engines/test_compaction.py) and the
# legacy writer features every reader-3/writer-7 table lists. Column mapping is not among them.
COMPACTABLE_FEATURES = frozenset({"deletionVectors", "appendOnly", "invariants"})


def writable_as_is(min_reader: int, min_writer: int, features: Optional[list[str]],
                   reader_features: Optional[list[str]] = None) -> bool:
    """Does delta-rs rewrite this table's files without a feature it might not keep?
    >>> writable_as_is(1, 2, None), writable_as_is(3, 7, ["deletionVectors"], ["deletionVectors"])
    (True, True)
    >>> writable_as_is(1, 4, None), writable_as_is(2, 5, None), writable_as_is(3, 7, ["columnMapping"], ["columnMapping"])
    (False, False, False)

    Type widening (a column widened in place, core/tables.py): delta-rs 1.6.6 neither reads nor
    writes such a table ("Unsupported table features required: [TypeWidening]"), so it is left alone:
    >>> writable_as_is(3, 7, ["typeWidening", "invariants", "appendOnly"], ["typeWidening"])
    False
    """
    if min_reader <= 1 and min_writer <= 2 and not features:
        return True
    return (min_reader == 3 and min_writer == 7 and set(features or ()) <= COMPACTABLE_FEATURES
            and set(reader_features or ()) <= {"deletionVectors"})


class SmallFileCompaction:
    """The background worker (one thread, started at the first table due)."""

    def __init__(self, registry, policy: CompactionPolicy):
        self.registry = registry
        self.policy = policy
        self._queue: "queue.Queue" = queue.Queue()
        self._pending: set[str] = set()
        self._given_up: set[str] = set()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self.compactions = 0   # done by this process (tests and the log read it)

    def after_commit(self, ref, settings) -> None:
        """A commit of `ref`'s table under `settings` ended (its lock released): look at it in the
        background (a compaction is then mirrored as Iceberg under those settings)."""
        if self.policy.min_small_files <= 0 or not ref.warehouse.can_list:
            return
        with self._lock:
            if ref.location in self._pending or ref.location in self._given_up:
                return
            self._pending.add(ref.location)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="compaction", daemon=True)
                self._thread.start()
        self._queue.put((ref, settings))

    def _run(self) -> None:
        while True:
            ref, settings = self._queue.get()
            with self._lock:
                self._pending.discard(ref.location)
            try:
                if self.consider(ref):
                    # The compaction is a Delta commit like any other: mirrored now, not with the next
                    # request (a failed mirror is logged and caught up then).
                    self.registry.mirror_committed(settings, ref)
            except Exception as exc:  # noqa: BLE001 - compaction never fails a write or the process
                with self._lock:
                    self._given_up.add(ref.location)
                log.warning(f"compaction of {ref.display} failed ({type(exc).__name__}: {_first_line(exc)}); "
                            "its small files stay until upkeep compacts them")

    def consider(self, ref) -> bool:
        """Compact `ref`'s table when it is due (True: a compaction was committed)."""
        with self.registry.locked(ref):
            if not has_commits(ref.warehouse, ref.location):
                return False    # dropped meanwhile
            table = open_table(ref.warehouse, ref.location, for_commits=True)
            protocol = table.protocol()
            if not writable_as_is(protocol.min_reader_version, protocol.min_writer_version, protocol.writer_features,
                                  protocol.reader_features):
                with self._lock:
                    self._given_up.add(ref.location)
                return False
            sizes = [int(s) for s in table.get_add_actions(flatten=True).column("size_bytes").to_pylist()]
            if not self.policy.due(sizes):
                return False
            began = time.monotonic()
            metrics = table.optimize.compact(target_size=self.policy.target_bytes, max_concurrent_tasks=1)
            self.registry.forget(ref)
        self.compactions += 1
        log.info(f"compacted {ref.display}: {metrics.get('numFilesRemoved')} small files into "
                 f"{metrics.get('numFilesAdded')} in {time.monotonic() - began:.2f}s (a commit that changes no data)")
        return True


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""
