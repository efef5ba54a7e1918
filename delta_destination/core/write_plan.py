"""A keyed write's plan, made once: which statement, on which engine, reading which files, with
which table properties first, under which memory estimate, and what runs after the commit.

Every decision a keyed write needs is a pure function of what the core knows once the table's
lock is held: the request's batch (the positional merge source, core/writer.py), the table's
snapshot (one read of its Delta log, core/delta_log.py), the engine the table was opened on and
the request's settings. `plan_write` makes them all at once, so they are decided in one place,
tested without an engine (tests/unit/test_write_plan.py) and logged in one line (`WritePlan.line`);
core/writer.py and core/history.py then execute the plan, and nothing on the way decides again.

The snapshot is read under the table's lock, not before it: another process (upkeep, the other
engine, a second destination) may commit between a read ahead of the lock and the lock, and a
plan from an older snapshot could skip a file that now holds a batch key. Reading the log costs
a few milliseconds against the seconds of the statement.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pyarrow as pa

from ..engines.router import SPARK, Dialect, EngineChoice, dialect_for, merge_choice
from ..settings import ICEBERG_OFF, Settings
from .delta_log import TableSnapshot
from .key_ranges import keys_cannot_match
from .memory import gb, table_size
from .model import TableSchema
from .target_files import TouchedFiles, file_stats, target_predicate, touched_files

# What a plan runs. APPEND: no key of the batch can be stored (the log proves it), a plain append;
# MERGE: one MERGE; PROBE: the engine is asked whether any key is stored, then APPEND or MERGE;
# HISTORY: history mode's read of the current versions, then one MERGE.
APPEND, MERGE, PROBE, HISTORY = "append", "merge", "probe, then append or merge", "history merge"

# MERGE, UPDATE and DELETE mark rows in a deletion vector instead of rewriting their files (Apache
# Spark + Delta, and Sail's MERGE); each dialect says from which table size (deletion_vectors_from_bytes).
DELETION_VECTORS = "delta.enableDeletionVectors"


@dataclass(frozen=True)
class PropertyChange:
    """Table properties to set (one metadata commit) before the engine rewrites the table."""

    properties: dict[str, str]
    why: str


@dataclass(frozen=True)
class MemoryEstimate:
    """The MERGE engine's estimated peak against the memory budget (engines whose MERGE memory
    grows with the target table: embedded Sail)."""

    estimate: int
    budget: int

    @property
    def refused(self) -> bool:
        return self.estimate > self.budget


@dataclass(frozen=True)
class WriteFacts:
    """What a keyed write is planned from (see the module docstring)."""

    display: str
    table: TableSchema
    keys: tuple[str, ...]
    batch_keys: dict                  # key column -> the batch's values (pa.Array)
    source_bytes: int                 # the Arrow bytes the engine gets
    snapshot: Optional[TableSnapshot]  # None: the destination cannot read the log here
    opened_on: EngineChoice           # the engine the table was opened on, and why
    request: Settings                 # the request's own settings (engine auto stays auto)
    spark_available: bool             # has auto an Apache Spark engine to move a MERGE to
    history: bool = False
    new_keys: Optional[pa.Table] = None  # the positional merge source, for the log's key ranges (not history)
    after_commit: tuple[str, ...] = ()


@dataclass(frozen=True)
class WritePlan:
    display: str
    version: Optional[int]             # the snapshot's Delta version (None: unknown)
    statement: str                     # APPEND, MERGE, PROBE or HISTORY
    engine: EngineChoice               # the engine of the MERGE (the lease moves there first if it differs)
    opened_on: EngineChoice
    target_predicate: Optional[str]    # on the target only, lets the engine skip files (never logged: it holds keys)
    touched: Optional[TouchedFiles]    # the files a batch key can be in, from the log (None: not looked at)
    properties_first: Optional[PropertyChange]
    memory: Optional[MemoryEstimate]
    after_commit: tuple[str, ...] = ()

    @property
    def moves(self) -> bool:
        """Does the MERGE run on another engine than the one the table was opened on?"""
        return self.engine.engine != self.opened_on.engine

    @property
    def refused(self) -> bool:
        """Over the memory budget on an engine that cannot hand the MERGE on: nothing is written."""
        return self.memory is not None and self.memory.refused and not self.moves

    def line(self) -> str:
        """The plan in one log line (sizes and counts only: no key, no value).
        >>> p = WritePlan("s.t", 7, MERGE, EngineChoice("spark", "configured", False), EngineChoice("spark", "configured", False),
        ...               "t.id IN (1)", TouchedFiles(1, 10, 4, 40), None, None, ("events",))
        >>> p.line()
        'plan for s.t at version 7: merge on spark (configured); 1 of 4 files can hold a batch key (10 of 40 bytes); target predicate given; after the commit: events'
        """
        parts = [f"{self.statement} on {self.engine.engine} ({self.engine.reason})"]
        if self.moves:
            parts[0] += f", moved from {self.opened_on.engine}"
        if self.touched is not None:
            parts.append(f"{self.touched.describe()} ({self.touched.bytes} of {self.touched.of_bytes} bytes)")
        if self.statement != APPEND:
            parts.append("target predicate given" if self.target_predicate else "every file read")
        if self.properties_first is not None:
            parts.append(f"first: {', '.join(f'{k}={v}' for k, v in self.properties_first.properties.items())}")
        if self.memory is not None:
            parts.append(f"estimated peak {gb(self.memory.estimate)} of a budget of {gb(self.memory.budget)}")
        if self.after_commit:
            parts.append(f"after the commit: {', '.join(self.after_commit)}")
        version = "an unknown version" if self.version is None else f"version {self.version}"
        return f"plan for {self.display} at {version}: " + "; ".join(parts)


def plan_write(f: WriteFacts) -> WritePlan:
    """The plan of one keyed write (pure: tests/unit/test_write_plan.py)."""
    size = table_size(f.snapshot)
    target = size.bytes if size is not None else None
    opened = dialect_for(f.opened_on.engine)
    if f.history:
        statement = HISTORY
    elif f.new_keys is not None and keys_cannot_match(f.snapshot, f.table, f.keys, f.new_keys):
        statement = APPEND
    elif opened.probes_keys_before_merge(target):
        statement = PROBE
    else:
        statement = MERGE
    version = f.snapshot.version if f.snapshot is not None else None
    if statement == APPEND:
        return WritePlan(f.display, version, APPEND, f.opened_on, f.opened_on, None, None, None, None, f.after_commit)
    engine, memory = merge_engine(f, target, opened)
    merging = opened if engine.engine == f.opened_on.engine else dialect_for(engine.engine)
    touched, predicate = skipping(f, merging)
    configuration = f.snapshot.configuration if f.snapshot is not None else None
    first = deletion_vectors_first(engine, target, configuration, merging, iceberg=f.request.iceberg != ICEBERG_OFF)
    return WritePlan(f.display, version, statement, engine, f.opened_on, predicate, touched, first, memory, f.after_commit)


def merge_engine(f: WriteFacts, target_bytes: Optional[int], opened: Dialect) -> tuple[EngineChoice, Optional[MemoryEstimate]]:
    """The engine of the MERGE and its memory estimate: the engine the table was opened on,
    unless its MERGE memory grows with the table past the budget and auto may hand it to
    Apache Spark (engines/choice.py merge_choice)."""
    if target_bytes is None:
        return f.opened_on, None
    estimate = opened.merge_memory_estimate(target_bytes, f.source_bytes)
    if estimate is None:
        return f.opened_on, None
    budget = f.request.memory_budget_bytes
    return merge_choice(f.opened_on, f.spark_available, target_bytes, f.source_bytes, budget), \
        MemoryEstimate(estimate, budget)


def skipping(f: WriteFacts, merging: Dialect) -> tuple[Optional[TouchedFiles], Optional[str]]:
    """The files a batch key can be in (from the snapshot's key statistics) and the predicate on
    the target that lets the engine skip the others (core/target_files.py): none on an engine
    that reads every file whatever the predicate (its dialect says), nor where the log shows that
    every file can hold a batch key. Where the log could not be read the predicate is still
    given: it never changes a result."""
    if not merging.merge_skips_files_by_target_predicate:
        return None, None
    touched = touched_files(file_stats(f.snapshot, f.keys), f.batch_keys) if f.snapshot is not None else None
    if touched is not None and not touched.skips_any:
        return touched, None
    return touched, target_predicate(f.table, f.keys, f.batch_keys)


def deletion_vectors_first(engine: EngineChoice, table_bytes: Optional[int], configuration: Optional[dict[str, str]],
                           dialect: Optional[Dialect] = None, iceberg: bool = False) -> Optional[PropertyChange]:
    """Deletion vectors on before the engine's first rewrite of a table, once per table (a
    metadata-only commit; `configuration`: the table's properties, None when unknown).
    Without them Spark's MERGE copies every unchanged row of every file it touches, which with
    uniform keys is the whole table: tables auto moves to Spark for their size get them at their
    first Spark rewrite (docs/benchmarks.md: the 100k upsert into 3M rows on a fresh server took
    68 s with them, 109-111 s without), and so does any table an engine rewrites once it holds
    that engine's `deletion_vectors_from_bytes` (`dialect`: the engine's, when the caller has it; Spark: 8 MiB; Sail: 64 MiB, where its MERGE stops
    copying the files it touches). Tables are created without them on both engines, so small
    tables' MERGEs stay cheap and readable by every reader. Sail 0.7.2 and delta-rs read and write
    such tables (tests/engines/test_cross_engine.py); delta-rs also compacts them. Never on a table
    whose own property is set (a team that reads with a reader refusing them sets it to 'false'), nor on a table
    whose Iceberg metadata is written (`iceberg`): Iceberg readers of that metadata cannot apply
    deletion vectors, so the mirror would have to stop (core/iceberg/plan.py).
    >>> spark = EngineChoice("spark", "configured", False)
    >>> deletion_vectors_first(spark, 9 * 2**20, {}).properties
    {'delta.enableDeletionVectors': 'true'}
    >>> deletion_vectors_first(spark, 2**20, {}), deletion_vectors_first(spark, 9 * 2**20, {DELETION_VECTORS: "true"})
    (None, None)
    >>> deletion_vectors_first(spark, 9 * 2**20, {DELETION_VECTORS: "false"}) is None   # a table's owner said no
    True
    >>> deletion_vectors_first(spark, 9 * 2**20, {}, iceberg=True) is None
    True
    """
    if iceberg:
        return None
    threshold = (dialect or dialect_for(engine.engine)).deletion_vectors_from_bytes
    if threshold is None:
        return None
    if engine.code != "merge_over_budget":   # moved for its size: big by definition
        if (table_bytes is not None and table_bytes < threshold) or (table_bytes is None and engine.engine != SPARK):
            return None
    if configuration is None or DELETION_VECTORS in configuration:   # on already, or its owner's 'false'
        return None
    name = "Apache Spark" if engine.engine == SPARK else "embedded Sail"
    return PropertyChange({DELETION_VECTORS: "true"}, f"turning deletion vectors on before its first rewrite on {name} "
                          "(a MERGE then marks replaced rows instead of copying every file it touches)")
