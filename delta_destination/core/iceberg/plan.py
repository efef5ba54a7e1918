"""From the Delta versions not yet mirrored to the Iceberg snapshots that mirror them (pure:
tests/unit/test_iceberg_plan.py).

The mirror knows the last Delta version its Iceberg table mirrors (`delta-version` in the current
snapshot's summary) and reads the Delta commits after it. Each commit's add and remove actions are
the data files the snapshot adds and removes: the same Parquet files, nothing copied. One snapshot
per Delta version, so a reader's time travel by snapshot id lands on exactly one Delta version.

What Iceberg cannot say is never written: a Delta version whose live files carry deletion vectors
(rows a reader must skip that Iceberg metadata written here cannot express) gets no snapshot; its
changes are carried to the next version whose live files carry none, and the plan says the table is
stale (the Iceberg side then keeps the last state it mirrored, one Delta really had).

When the commits cannot be read one by one (the Iceberg side is new, a commit file was cleaned up
behind a checkpoint, or it is too far behind) the plan is one snapshot of the table's current files,
diffed against the files the Iceberg side holds (a `Jump`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import unquote

# A catch-up longer than this becomes one snapshot of the current files (a Jump): its cost stays that
# of one commit whatever the history.
MAX_VERSIONS_ONE_BY_ONE = 100
# Iceberg snapshots kept at most (the newest; VACUUM's rule may expire them earlier). Why a count: pyiceberg
# copies the whole table metadata, every snapshot in it, several times for each snapshot it commits
# (Transaction.table_metadata re-applies the staged updates at each read), so a mirror commit cost
# ~60 ms with 25 snapshots and ~480 ms with 300 (measured 2026-12-03, housekeeping.py). Time travel over
# the Iceberg side reaches the last SNAPSHOTS_KEPT Delta versions; Delta's own reaches its retention.
SNAPSHOTS_KEPT = 10


@dataclass(frozen=True)
class FileAdd:
    """A data file a Delta add action puts live (path relative to the table, decoded)."""

    path: str
    size: int
    stats: Optional[str]        # the add action's stats JSON (numRecords, nullCount, minValues, maxValues)
    has_deletion_vector: bool


@dataclass(frozen=True)
class Step:
    """One Iceberg snapshot: the Delta version it mirrors and what it changes."""

    version: int
    adds: tuple[FileAdd, ...]
    removes: tuple[str, ...]
    metadata: Optional[dict] = None      # the newest metaData action up to this version, when one changed
    timestamp_ms: Optional[int] = None   # the Delta commit's time (commitInfo.timestamp): when its removes happened


@dataclass(frozen=True)
class MirrorPlan:
    steps: tuple[Step, ...]
    stale_from: Optional[int] = None     # the first Delta version that could not be mirrored (deletion vectors)
    jump: bool = False                   # from the current files, not commit by commit

    @property
    def stale(self) -> bool:
        return self.stale_from is not None


def file_path(action: dict) -> str:
    """A Delta action's path, decoded (the log stores it URL-encoded).
    >>> file_path({"path": "part-0%3A1.parquet"})
    'part-0:1.parquet'
    """
    return unquote(action["path"])


def file_add(add: dict) -> FileAdd:
    return FileAdd(file_path(add), int(add.get("size") or 0), add.get("stats"), bool(add.get("deletionVector")))


@dataclass
class _Pending:
    """Changes of versions not yet written as a snapshot (carried across versions with deletion vectors)."""

    adds: dict = field(default_factory=dict)
    removes: set = field(default_factory=set)
    metadata: Optional[dict] = None
    with_dv: set = field(default_factory=set)   # live paths that carry a deletion vector
    timestamp_ms: Optional[int] = None

    def remove(self, path: str) -> None:
        self.with_dv.discard(path)
        if path in self.adds and path not in self.removes:
            del self.adds[path]      # added and removed within the pending versions: Iceberg never saw it
        else:
            self.adds.pop(path, None)
            self.removes.add(path)

    def add(self, a: FileAdd) -> None:
        self.adds[a.path] = a
        if a.has_deletion_vector:
            self.with_dv.add(a.path)
        else:
            self.with_dv.discard(a.path)

    def step(self, version: int) -> Step:
        s = Step(version, tuple(self.adds[p] for p in sorted(self.adds)), tuple(sorted(self.removes)), self.metadata,
                 self.timestamp_ms)
        self.adds, self.removes, self.metadata, self.timestamp_ms = {}, set(), None, None
        return s


def plan_commits(commits: list[tuple[int, list[dict]]]) -> MirrorPlan:
    """The snapshots of consecutive Delta commits (version, its actions), oldest first, starting
    right after the mirrored version.
    >>> add = lambda p, dv=None: {"add": {"path": p, "size": 1, "deletionVector": dv}}
    >>> p = plan_commits([(1, [add("a")]), (2, [{"remove": {"path": "a"}}, add("b")])])
    >>> [(s.version, [a.path for a in s.adds], s.removes) for s in p.steps], p.stale
    ([(1, ['a'], ()), (2, ['b'], ('a',))], False)
    >>> p = plan_commits([(1, [{"remove": {"path": "a"}}, add("a", {"id": 1})]), (2, [{"remove": {"path": "a"}}, add("c")])])
    >>> [(s.version, [a.path for a in s.adds], s.removes) for s in p.steps], p.stale_from  # purged at 2: not stale
    ([(2, ['c'], ('a',))], None)
    """
    pending, steps, stale_from = _Pending(), [], None
    for version, actions in commits:
        for a in actions:
            if isinstance(a.get("metaData"), dict):
                pending.metadata = a["metaData"]
            elif isinstance(a.get("remove"), dict):
                pending.remove(file_path(a["remove"]))
            elif isinstance(a.get("add"), dict):
                pending.add(file_add(a["add"]))
            elif isinstance(a.get("commitInfo"), dict) and isinstance(a["commitInfo"].get("timestamp"), int):
                pending.timestamp_ms = a["commitInfo"]["timestamp"]
        if pending.with_dv:
            stale_from = version if stale_from is None else stale_from
            continue
        steps.append(pending.step(version))
    # Versions still pending at the end (deletion vectors live now) stay unmirrored: stale.
    return MirrorPlan(tuple(steps), stale_from if pending.with_dv else None)


def plan_jump(version: int, live: list[FileAdd], mirrored_paths: set[str], metadata: dict) -> MirrorPlan:
    """One snapshot taking the Iceberg side from the files it holds (`mirrored_paths`) to the Delta
    table's live files at `version`; none (stale) while a live file carries a deletion vector.
    >>> plan_jump(5, [FileAdd("b", 1, None, False)], {"a", "b"}, {}).steps[0].removes
    ('a',)
    >>> plan_jump(5, [FileAdd("b", 1, None, True)], set(), {}).stale_from
    5
    """
    if any(f.has_deletion_vector for f in live):
        return MirrorPlan((), stale_from=version, jump=True)
    live_paths = {f.path for f in live}
    adds = tuple(sorted((f for f in live if f.path not in mirrored_paths), key=lambda f: f.path))
    return MirrorPlan((Step(version, adds, tuple(sorted(mirrored_paths - live_paths)), metadata),), jump=True)


def catch_up_range(mirrored: Optional[int], current: int) -> Optional[range]:
    """The versions to read commit by commit, or None for a jump (nothing mirrored yet, or too far behind).
    >>> catch_up_range(3, 5), catch_up_range(None, 5), catch_up_range(1, 500)
    (range(4, 6), None, None)
    """
    if mirrored is None or current - mirrored > MAX_VERSIONS_ONE_BY_ONE:
        return None
    return range(mirrored + 1, current + 1)


def expired_snapshots(snapshots: list[tuple[int, Optional[int]]], now_ms: int, retention_ms: int,
                      kept_at_most: int = SNAPSHOTS_KEPT) -> list[int]:
    """The snapshots to expire so that none points at a file VACUUM may have deleted: `snapshots`
    are (id, the Delta time of the version it mirrors), oldest first. VACUUM deletes a file once
    it was removed more than its retention ago (never less than Delta's 7 days: settings.py), and
    a snapshot's files are removed at the earliest by the next snapshot's Delta version, so a
    snapshot expires once its successor's Delta time is older than the retention. A successor of
    unknown time (a jump: the files it removed may have been removed long before) expires every
    snapshot before it. Beyond that only the newest `kept_at_most` are kept (why: SNAPSHOTS_KEPT).
    The current snapshot never expires.
    >>> day = 86_400_000
    >>> expired_snapshots([(1, 0), (2, 1 * day), (3, 9 * day), (4, 10 * day)], 10 * day, 7 * day)
    [1]
    >>> expired_snapshots([(1, 0), (2, 9 * day), (3, None)], 10 * day, 7 * day)
    [1, 2]
    >>> expired_snapshots([(1, 9 * day), (2, 9 * day), (3, 10 * day)], 10 * day, 7 * day, kept_at_most=2)
    [1]
    """
    out = [sid for sid, _ in snapshots[:max(0, len(snapshots) - max(1, kept_at_most))]]
    for i, (sid, _) in enumerate(snapshots[:-1]):
        later = [t for _, t in snapshots[i + 1:]]
        successor = later[0]
        if sid not in out and (successor is None or successor < now_ms - retention_ms or None in later):
            out.append(sid)
    return out
