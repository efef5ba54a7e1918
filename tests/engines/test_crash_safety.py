"""Crash safety (issue 5, part 1): SIGKILL, client cancellation and deadlines mid-request.

A dedicated server and warehouse. One populated base table per operation
(WriteBatch, WriteHistoryBatch, AlterTable with type changes = a rewrite,
Truncate, and every Migrate operation the server answers `success` for) is
copied, with the server down, into one fresh copy per trial plus a reference
copy. The reference run applies each request to its reference copy: that gives
the after-state, the request's duration D and its number of Delta commits.
Then, per trial, on a fresh copy:
  1. the request is sent from a thread and the server is SIGKILLed after a
     seeded random delay in [0, 1.25 D], or right after the request's i-th Delta
     commit (or a table directory appearing/vanishing) becomes visible, which
     probes every commit boundary of multi-commit operations;
  2. the server is restarted on the same warehouse;
  3. every table is readable (an independent reader, delta-rs + pyarrow); the
     trial's tables (two for rename/copy) jointly equal their before-state or
     their after-state (exactly the after-state when the request had answered
     success), in rows and Arrow schema, and DescribeTable answers the before
     or the after description; every other table is as it was (read in full,
     or, between full checks, unchanged files = unchanged table);
  4. the request is replayed: success, and the tables equal the after-state.
Cancellation (`future.cancel()`) and deadline expiry (`timeout=`) get the same
checks, without a restart: the server finishes or abandons the request on its
own, so a barrier request on the same table (taking the same table lock) is
awaited before looking.

Default run: `test_crash_kill_short`, `test_crash_at_every_commit_boundary_of_migrations`,
`test_cancel_and_deadline_short` (each under a minute). `slow`: `test_crash_kill_long`
(8 random kills per core operation, 3 per Migrate operation, every commit
boundary, cancellations and deadlines everywhere). Violations are collected and
reported together. Figures (kills, kills that landed inside a request, rows
compared) are stored in the pytest cache under `reliability/crash/*` for
docs/reliability.md. Set CRASH_SEED to reproduce a run.
"""
from __future__ import annotations

import datetime as dt
import os
import random
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import grpc
import pytest

from testkit.fivetran_requests import batch_file, col, columns_of, table, ts, write_request
from testkit.server_process import RunningServer
from testkit.delta_read import read_delta_table
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 3, 1, tzinfo=UTC)
MAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
SCHEMA = "crash"
SEED = int(os.environ.get("CRASH_SEED", "20240501"))

LIVE_COLS = (col("id", "LONG", pk=True), col("v", "STRING"), col("n", "LONG"), col("amount", "DOUBLE"),
             col("_fivetran_synced", "UTC_DATETIME"), col("_fivetran_deleted", "BOOLEAN"))
HIST_COLS = (col("id", "LONG", pk=True), col("v", "STRING"), col("_fivetran_start", "UTC_DATETIME", pk=True),
             col("_fivetran_end", "UTC_DATETIME"), col("_fivetran_active", "BOOLEAN"),
             col("_fivetran_synced", "UTC_DATETIME"))


def live(name):
    return table(name, *LIVE_COLS)


def hist(name):
    return table(name, *HIST_COLS)


def live_row(i, tag="base", synced=T0):
    return {"id": i, "v": f"{tag}-{i}", "n": i * 3, "amount": i / 7, "_fivetran_synced": synced, "_fivetran_deleted": False}


def hist_row(i, start, tag="base"):
    return {"id": i, "v": f"{tag}-{i}", "_fivetran_start": start, "_fivetran_end": MAX, "_fivetran_active": True,
            "_fivetran_synced": start}


# ----------------------------------------------------------------------------
# operations: each knows its base table, how to populate it and its request
# ----------------------------------------------------------------------------


@dataclass
class Op:
    name: str                                    # "WriteBatch", "Migrate:rename_table", ...
    slug: str                                    # copies are <slug>_<j>
    rpc: str
    make_table: Callable[[str], object]
    populate: Callable[["Harness", str], None]
    request: Callable[["Harness", str], object]  # (harness, table name) -> request message
    extra: tuple = ()                            # suffixes of other tables the request creates: <slug>_<j><suffix>
    weight: int = 1                              # kills per round in the long run
    commits: int = 0                             # Delta commits the request makes (reference run)
    supported: bool = True
    duration: float = 0.0
    after: dict = field(default_factory=dict)    # {"state": ..., "describe": ...} over the involved tables
    before: dict = field(default_factory=dict)

    def involved(self, name: str) -> list[str]:
        return [name] + [name + suffix for suffix in self.extra]


def _populate_live(h: "Harness", name: str, synced_spread=False):
    n = h.rows
    rows = [live_row(i, synced=T0 + dt.timedelta(seconds=i % 100) if synced_spread else T0) for i in range(n)]
    assert h.stub.WriteBatch(write_request(SCHEMA, live(name), replace=[batch_file(h.files, live(name), rows)])).success


def _populate_hist(h: "Harness", name: str):
    rows = [hist_row(i, T0) for i in range(h.rows)]
    req = _history_request(h, name, replace=rows)
    assert h.stub.WriteHistoryBatch(req).success


def _history_request(h: "Harness", name: str, *, earliest=(), replace=(), delete=()):
    t = hist(name)
    base = write_request(
        SCHEMA, t,
        replace=[batch_file(h.files, t, list(replace))] if replace else [],
        delete=[batch_file(h.files, t, list(delete), kind="delete", columns=["id", "_fivetran_end", "_fivetran_synced"])]
        if delete else [],
    )
    e = [batch_file(h.files, t, list(earliest), kind="earliest", columns=["id", "_fivetran_start"])] if earliest else []
    req = pb.WriteHistoryBatchRequest(schema_name=SCHEMA, table=t, replace_files=base.replace_files,
                                      delete_files=base.delete_files, earliest_start_files=[p for p, _ in e],
                                      file_params=base.file_params)
    for k, v in base.keys.items():
        req.keys[k] = v
    for p, k in e:
        req.keys[p] = k
    return req


def _wb_request(h: "Harness", name: str):
    def make():
        n, t1 = h.rows, T0 + dt.timedelta(hours=1)
        t = live("__")
        replace = [live_row(i, "new", t1) for i in range(0, n // 2)] + [live_row(i, "new", t1) for i in range(n, n + n // 2)]
        update = [{"id": i, "v": f"upd-{i}", "_fivetran_synced": t1} for i in range(n // 2, n // 2 + n // 4)]
        delete = [{"id": i, "_fivetran_synced": t1} for i in range(n // 2 + n // 4, n // 2 + n // 4 + n // 8)]
        return write_request(
            SCHEMA, t, replace=[batch_file(h.files, t, replace)],
            update=[batch_file(h.files, t, update, kind="update", columns=["id", "v", "_fivetran_synced"])],
            delete=[batch_file(h.files, t, delete, kind="delete", columns=["id", "_fivetran_synced"])])
    req = pb.WriteBatchRequest()
    req.CopyFrom(h.cached("WriteBatch", make))
    req.table.name = name
    return req


def _whb_request(h: "Harness", name: str):
    def make():
        n, t1 = h.rows, T0 + dt.timedelta(hours=1)
        keys = range(0, n // 2)
        return _history_request(
            h, "__",
            earliest=[{"id": i, "_fivetran_start": t1} for i in keys],
            replace=[hist_row(i, t1, "v2") for i in keys] + [hist_row(i, t1, "new") for i in range(n, n + n // 4)],
            delete=[{"id": i, "_fivetran_end": t1, "_fivetran_synced": t1} for i in range(n // 2, n // 2 + n // 8)])
    req = pb.WriteHistoryBatchRequest()
    req.CopyFrom(h.cached("WriteHistoryBatch", make))
    req.table.name = name
    return req


def _alter_request(h: "Harness", name: str):
    # n LONG -> STRING and amount DOUBLE -> STRING: a rewrite of every row; plus one new column
    cols = [c if c.name not in ("n", "amount") else col(c.name, "STRING") for c in LIVE_COLS] + [col("added", "INT")]
    return pb.AlterTableRequest(schema_name=SCHEMA, table=table(name, *cols))


def _truncate_request(h: "Harness", name: str):
    return pb.TruncateRequest(schema_name=SCHEMA, table_name=name, synced_column="_fivetran_synced",
                              utc_delete_before=ts(T0 + dt.timedelta(seconds=50)))


def _migrate(**op):
    def build(h: "Harness", name: str):
        details = pb.MigrationDetails(schema=SCHEMA, table=name)
        for k, v in op.items():
            getattr(details, k).CopyFrom(v(name) if callable(v) else v)
        return pb.MigrateRequest(details=details)
    return build


STRING, OP_TS = 13, "2024-03-02T00:00:00Z"


def all_ops() -> list[Op]:
    L, H = (live, _populate_live), (hist, _populate_hist)
    return [
        Op("WriteBatch", "wb", "WriteBatch", *L, _wb_request, weight=2),
        Op("WriteHistoryBatch", "whb", "WriteHistoryBatch", *H, _whb_request, weight=2),
        Op("AlterTable", "alt", "AlterTable", *L, _alter_request, weight=2),
        Op("Truncate", "tr", "Truncate", live, lambda h, n: _populate_live(h, n, synced_spread=True), _truncate_request,
           weight=2),
        # Migrate: every operation the SDK defines (those answered `unsupported` are skipped)
        Op("Migrate:add_column_with_default_value", "m_addcol", "Migrate", *L, _migrate(add=pb.AddOperation(
            add_column_with_default_value=pb.AddColumnWithDefaultValue(column="added_c", column_type=STRING,
                                                                       default_value="dflt")))),
        Op("Migrate:update_column_value", "m_upd", "Migrate", *L, _migrate(
            update_column_value=pb.UpdateColumnValueOperation(column="v", value="same-everywhere"))),
        Op("Migrate:rename_column", "m_rencol", "Migrate", *L, _migrate(rename=pb.RenameOperation(
            rename_column=pb.RenameColumn(from_column="v", to_column="v_renamed")))),
        Op("Migrate:copy_column", "m_copycol", "Migrate", *L, _migrate(copy=pb.CopyOperation(
            copy_column=pb.CopyColumn(from_column="v", to_column="v_copy")))),
        Op("Migrate:rename_table", "m_rentab", "Migrate", *L, _migrate(rename=lambda n: pb.RenameOperation(
            rename_table=pb.RenameTable(from_table=n, to_table=n + "_to"))), extra=("_to",)),
        Op("Migrate:copy_table", "m_copytab", "Migrate", *L, _migrate(copy=lambda n: pb.CopyOperation(
            copy_table=pb.CopyTable(from_table=n, to_table=n + "_to"))), extra=("_to",)),
        Op("Migrate:copy_table_to_history_mode", "m_copyh", "Migrate", *L, _migrate(copy=lambda n: pb.CopyOperation(
            copy_table_to_history_mode=pb.CopyTableToHistoryMode(from_table=n, to_table=n + "_to",
                                                                 soft_deleted_column="_fivetran_deleted"))),
           extra=("_to",)),
        Op("Migrate:drop_table", "m_drop", "Migrate", *L, _migrate(drop=pb.DropOperation(drop_table=True))),
        Op("Migrate:soft_delete_to_history", "m_sd2h", "Migrate", *L, _migrate(
            table_sync_mode_migration=pb.TableSyncModeMigrationOperation(
                type=pb.SOFT_DELETE_TO_HISTORY, soft_deleted_column="_fivetran_deleted"))),
        Op("Migrate:history_to_soft_delete", "m_h2sd", "Migrate", *H, _migrate(
            table_sync_mode_migration=pb.TableSyncModeMigrationOperation(
                type=pb.HISTORY_TO_SOFT_DELETE, soft_deleted_column="_fivetran_deleted"))),
        Op("Migrate:add_column_in_history_mode", "m_addh", "Migrate", *H, _migrate(add=pb.AddOperation(
            add_column_in_history_mode=pb.AddColumnInHistoryMode(column="added_h", column_type=STRING, default_value="d",
                                                                 operation_timestamp=OP_TS)))),
        Op("Migrate:drop_column_in_history_mode", "m_droph", "Migrate", *H, _migrate(drop=pb.DropOperation(
            drop_column_in_history_mode=pb.DropColumnInHistoryMode(column="v", operation_timestamp=OP_TS)))),
    ]


def _succeeded(op: Op, resp) -> bool:
    if op.rpc == "Migrate":
        return resp.WhichOneof("response") == "success"
    return bool(getattr(resp, "success", False))


# ----------------------------------------------------------------------------
# the harness
# ----------------------------------------------------------------------------


class Harness:
    def __init__(self, start_server, base: Path, *, rows: int, copies: int, seed: int = SEED, only=None):
        self.start_server = start_server
        self.base = base
        self.wh = base / "warehouse"
        self.files = base / "files"
        self.files.mkdir(parents=True, exist_ok=True)
        self.log = base / "server.log"
        self.rows = rows
        self.copies = copies
        self.rnd = random.Random(seed)
        self.seed = seed
        self.ops = [op for op in all_ops() if only is None or only(op)]
        self.srv: Optional[RunningServer] = None
        self._cache: dict[str, object] = {}
        self.expected: dict[str, object] = {}   # table -> expected state (None: must not exist)
        self.next_copy = {op.name: 1 for op in self.ops}
        self.figures = {"kills": 0, "kills_inside_request": 0, "cancels": 0, "deadlines": 0, "rows_compared": 0,
                        "replays": 0, "restarts": 0, "tables_checked": 0}
        self.leftovers: set[str] = set()
        self.failures: list[str] = []
        self.fingerprints: dict[str, object] = {}

    # -- server --------------------------------------------------------------------------
    def start(self):
        self.srv = self.start_server(self.wh, self.log)
        self.figures["restarts"] += 1

    def stop(self):
        if self.srv is not None:
            self.srv.stop()
            self.srv = None

    @property
    def stub(self):
        return self.srv.stub

    def cached(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    # -- tables --------------------------------------------------------------------------
    def table_path(self, name) -> str:
        return str(self.wh / SCHEMA / name)

    def state(self, name):
        """(Arrow schema, sorted rows) read independently of the server; None if there is no table."""
        if not (self.wh / SCHEMA / name / "_delta_log").is_dir():
            assert not (self.wh / SCHEMA / name).exists(), f"{name}: a directory that is not a Delta table"
            return None
        t = read_delta_table(self.table_path(name))
        self.figures["rows_compared"] += t.num_rows
        self.figures["tables_checked"] += 1
        schema = tuple((f.name, str(f.type)) for f in t.schema)
        return schema, tuple(sorted(repr(tuple(r.values())) for r in t.to_pylist()))

    def log_entries(self, name) -> int:
        d = self.wh / SCHEMA / name / "_delta_log"
        try:
            return sum(1 for n in os.listdir(d) if n.endswith(".json") and n[:20].isdigit())
        except OSError:
            return 0

    def fingerprint(self, name):
        root = self.wh / SCHEMA / name
        out = []
        for dirpath, _, filenames in os.walk(root):
            for f in filenames:
                st = os.stat(os.path.join(dirpath, f))
                out.append((os.path.relpath(os.path.join(dirpath, f), root), st.st_size, st.st_mtime_ns))
        return tuple(sorted(out)) or None

    def schema_dirs(self) -> frozenset:
        try:
            return frozenset(os.listdir(self.wh / SCHEMA))
        except OSError:
            return frozenset()

    def states(self, op: Op, name: str) -> tuple:
        return tuple(self.state(t) for t in op.involved(name))

    def describe(self, name):
        r = self.stub.DescribeTable(pb.DescribeTableRequest(schema_name=SCHEMA, table_name=name), timeout=120)
        return None if r.not_found else columns_of(r)

    def describes(self, op: Op, name: str) -> tuple:
        return tuple(self.describe(t) for t in op.involved(name))

    def all_tables(self) -> list[str]:
        d = self.wh / SCHEMA
        names = sorted(p.name for p in d.iterdir() if p.is_dir()) if d.exists() else []
        hidden = [n for n in names if n.startswith((".", "_"))]
        self.leftovers.update(hidden)
        trash = self.wh / "_fivetran_trash"
        if trash.exists():
            self.leftovers.update(f"_fivetran_trash/{n}" for n in os.listdir(trash))
        return [n for n in names if not n.startswith((".", "_"))]

    # -- build ---------------------------------------------------------------------------
    def copy_name(self, op: Op, j: int) -> str:
        return f"{op.slug}_{j}"

    def build(self):
        """Base tables populated through the server, then copied (server down) for every trial."""
        self.start()
        for op in self.ops:
            base = f"{op.slug}_base"
            assert self.stub.CreateTable(pb.CreateTableRequest(schema_name=SCHEMA, table=op.make_table(base))).success
            op.populate(self, base)
        self.stop()
        for op in self.ops:
            base = self.wh / SCHEMA / f"{op.slug}_base"
            for j in range(self.copies + 1):
                shutil.copytree(base, self.wh / SCHEMA / self.copy_name(op, j))
            shutil.rmtree(base)
        self.start()
        for op in self.ops:
            name = self.copy_name(op, 0)
            op.before = {"state": self.states(op, name), "describe": self.describes(op, name)}
            for j in range(self.copies + 1):
                for t, st in zip(op.involved(self.copy_name(op, j)), op.before["state"]):
                    self.expected[t] = st
                    self.fingerprints[t] = self.fingerprint(t)
        self.reference()

    def reference(self):
        for op in self.ops:
            name = self.copy_name(op, 0)
            req = op.request(self, name)
            v0 = self.log_entries(name)
            t = time.monotonic()
            resp = getattr(self.stub, op.rpc)(req, timeout=600)
            op.duration = time.monotonic() - t
            op.commits = max(self.log_entries(n) for n in op.involved(name)) - v0 if _succeeded(op, resp) else 0
            if not _succeeded(op, resp):
                op.supported = False  # e.g. a Migrate operation answered `unsupported`
                assert op.rpc == "Migrate" and resp.WhichOneof("response") == "unsupported", (op.name, resp)
                assert self.states(op, name) == op.before["state"]
                continue
            op.after = {"state": self.states(op, name), "describe": self.describes(op, name)}
            assert op.after["state"] != op.before["state"], f"{op.name}: the request changes nothing"
            self._expect(op, name, op.after["state"])
            # the reference itself replays cleanly
            assert _succeeded(op, getattr(self.stub, op.rpc)(req, timeout=600)), f"{op.name}: replay failed"
            assert self.states(op, name) == op.after["state"], f"{op.name}: a replay changed the table"

    def _expect(self, op: Op, name: str, states: tuple):
        for t, st in zip(op.involved(name), states):
            self.expected[t] = st
            self.fingerprints[t] = self.fingerprint(t)

    def take_copy(self, op: Op) -> str:
        j = self.next_copy[op.name]
        assert j <= self.copies, f"no fresh copy left for {op.name}"
        self.next_copy[op.name] = j + 1
        return self.copy_name(op, j)

    # -- checks --------------------------------------------------------------------------
    def check_all(self, trial: str, name: str, op: Op, must_be_after: bool, others="all"):
        """Every table readable; the trial's tables jointly before or after; the others as expected."""
        mine = set(op.involved(name))
        got = self.states(op, name)
        allowed = [op.after["state"]] if must_be_after else [op.before["state"], op.after["state"]]
        assert got in allowed, (
            f"{trial}: {'/'.join(op.involved(name))} is neither the before- nor the after-state"
            f"{' (must be after: the request answered success)' if must_be_after else ''}; "
            f"{_diff(got, op.before['state'], op.after['state'])}")
        present = set(self.all_tables())
        for t in sorted((present | set(self.expected)) - mine):
            # "files": a table whose files (names, sizes, mtimes) are as when it was last read in full
            # is unchanged, so only changed tables are read again
            if others == "all" or self.fingerprint(t) != self.fingerprints.get(t):
                assert self.state(t) == self.expected.get(t), f"{trial}: {t} changed although no request touched it"
                self.fingerprints[t] = self.fingerprint(t)
        desc = self.describes(op, name)
        allowed_desc = [op.after["describe"]] if must_be_after else [op.before["describe"], op.after["describe"]]
        assert desc in allowed_desc, f"{trial}: DescribeTable answers {desc}, expected one of {allowed_desc}"
        return got

    def replay(self, trial: str, name: str, op: Op, req):
        resp = getattr(self.stub, op.rpc)(req, timeout=600)
        self.figures["replays"] += 1
        assert _succeeded(op, resp), f"{trial}: replay failed: {resp}"
        assert self.states(op, name) == op.after["state"], f"{trial}: the replay did not give the after-state"
        assert self.describes(op, name) == op.after["describe"], f"{trial}: DescribeTable after the replay differs"
        self._expect(op, name, op.after["state"])

    # -- trials --------------------------------------------------------------------------
    def kill_trial(self, op: Op, others="all", after_commit: int = 0) -> dict:
        """SIGKILL after a random delay, or (after_commit=i) as soon as the request's i-th Delta commit
        (or a table directory rename) is visible, to probe every commit boundary."""
        name = self.take_copy(op)
        req = op.request(self, name)
        self.describes(op, name)  # warm the fresh server up, so the request runs about as long as measured
        if after_commit:
            delay = None
            trial = f"kill[{op.name} on {name} right after commit {after_commit} of {op.commits}, CRASH_SEED={self.seed}]"
        else:
            delay = self.rnd.uniform(0, 1.25 * op.duration)
            trial = f"kill[{op.name} on {name} after {delay:.3f}s of ~{op.duration:.3f}s, CRASH_SEED={self.seed}]"
        out: dict = {}
        entries0 = {t: self.log_entries(t) for t in op.involved(name)}
        dirs0 = self.schema_dirs()

        def send():
            try:
                out["resp"] = getattr(self.stub, op.rpc)(req, timeout=600)
            except grpc.RpcError as exc:
                out["error"] = exc.code()

        th = threading.Thread(target=send)
        th.start()
        if delay is not None:
            time.sleep(delay)
        else:
            deadline = time.monotonic() + 5 * op.duration + 10
            while time.monotonic() < deadline and th.is_alive():
                if any(self.log_entries(t) - entries0[t] >= after_commit for t in entries0) or self.schema_dirs() != dirs0:
                    break
                time.sleep(0.0005)
        self.srv.proc.kill()
        self.srv.proc.wait()
        th.join(60)
        assert not th.is_alive(), f"{trial}: the client did not notice the dead server"
        self.figures["kills"] += 1
        answered = "resp" in out and _succeeded(op, out["resp"])
        if not answered:
            self.figures["kills_inside_request"] += 1
        self.stop()
        self.start()
        got = None
        try:
            got = self.check_all(trial, name, op, must_be_after=answered, others=others)
        except AssertionError as exc:
            self.failures.append(str(exc).split("\nassert")[0])
        try:
            self.replay(trial, name, op, req)
        except AssertionError as exc:
            self.failures.append(str(exc).split("\nassert")[0])
        return {"trial": trial, "answered": answered,
                "landed": "after" if got == op.after["state"] else "before" if got == op.before["state"] else "neither"}

    def interrupt_trial(self, op: Op, how: str) -> dict:
        """Client cancellation or deadline expiry mid-request, then the same checks (no restart)."""
        name = self.take_copy(op)
        req = op.request(self, name)
        call = getattr(self.stub, op.rpc)
        if how == "cancel":
            delay = self.rnd.uniform(0, op.duration)
            fut = call.future(req, timeout=600)
            time.sleep(delay)
            outcome = "cancelled" if fut.cancel() else "finished first"
            self.figures["cancels"] += 1
        else:
            delay = self.rnd.choice([0.05, self.rnd.uniform(0.01, max(op.duration, 0.02))])
            try:
                resp = call(req, timeout=delay)
                outcome = "finished first" if _succeeded(op, resp) else f"answered {resp}"
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED, exc
                outcome = "deadline exceeded"
            self.figures["deadlines"] += 1
        trial = f"{how}[{op.name} on {name} at {delay:.3f}s of ~{op.duration:.3f}s: {outcome}, CRASH_SEED={self.seed}]"
        time.sleep(0.3)
        self.barrier(op, name)
        got = None
        try:
            got = self.check_all(trial, name, op, must_be_after=(outcome == "finished first"), others="files")
        except AssertionError as exc:
            self.failures.append(str(exc).split("\nassert")[0])
        try:
            self.replay(trial, name, op, req)
        except AssertionError as exc:
            self.failures.append(str(exc).split("\nassert")[0])
        return {"trial": trial,
                "landed": "after" if got == op.after["state"] else "before" if got == op.before["state"] else "neither"}

    def barrier(self, op: Op, name: str):
        """Requests on one table are serialized by a per-table lock: a request that takes the same
        locks returns only once the abandoned one is done. An empty WriteBatch takes the table's lock
        (it answers NOT_FOUND when the abandoned request dropped or renamed the table)."""
        for t in op.involved(name):
            req = pb.WriteBatchRequest(schema_name=SCHEMA, table=table(t))
            try:
                self.stub.WriteBatch(req, timeout=600)
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.NOT_FOUND, exc

    def final_check(self):
        present = set(self.all_tables())
        for t in sorted(present | set(self.expected)):
            assert self.state(t) == self.expected.get(t), f"final: {t}"


def _diff(got, before, after) -> str:
    def rows(states):
        return set(r for s in states if s for r in s[1])

    def summary(states):
        return "; ".join("absent" if s is None else f"{len(s[1])} rows, columns {[c for c, _ in s[0]]}" for s in states)

    g, b, a = rows(got), rows(before), rows(after)
    return (f"got [{summary(got)}]; before [{summary(before)}]; after [{summary(after)}]; "
            f"{len(g - b - a)} rows in neither, e.g. {sorted(g - b - a)[:2]}")


def _store(request, key: str, figures: dict):
    request.config.cache.set(f"reliability/crash/{key}", figures)
    print(f"\ncrash safety ({key}): {figures}")


def _summary(h: Harness, results: list[dict]) -> dict:
    return {**h.figures, "ops": [op.name for op in h.ops if op.supported],
            "unsupported": [op.name for op in h.ops if not op.supported],
            "landed_after": sum(r["landed"] == "after" for r in results),
            "landed_before": sum(r["landed"] == "before" for r in results),
            "landed_neither": sum(r["landed"] == "neither" for r in results),
            "commits": {op.name: op.commits for op in h.ops if op.supported},
            "failures": len(h.failures),
            "leftovers": sorted(h.leftovers),
            "durations": {op.name: round(op.duration, 3) for op in h.ops}}


CORE = ("WriteBatch", "WriteHistoryBatch", "AlterTable", "Truncate")


# ----------------------------------------------------------------------------
# the tests
# ----------------------------------------------------------------------------


def _boundary_kills(h: Harness, ops) -> list[dict]:
    """A kill right after the first visible change (a commit, or a table directory appearing or
    vanishing) of every operation, and right after each further intermediate commit."""
    out = []
    for op in ops:
        for i in range(1, max(op.commits, 2)):
            out.append(h.kill_trial(op, after_commit=i))
    return out


def _finish(h: Harness):
    assert not h.failures, f"{len(h.failures)} crash-safety violations:\n" + "\n".join(h.failures)


def test_crash_kill_short(tmp_path, request, dedicated_server):
    """A random kill in each core operation and in one Migrate, plus a kill right after each of their
    intermediate commits (default run, under a minute)."""
    picks = {*CORE, "Migrate:update_column_value"}
    h = Harness(dedicated_server, tmp_path, rows=4000, copies=4, only=lambda op: op.name in picks)
    results = []
    try:
        h.build()
        ops = [op for op in h.ops if op.supported]
        for op in ops:
            results.append(h.kill_trial(op))
        results += _boundary_kills(h, ops)
        h.final_check()
    finally:
        h.stop()
        _store(request, "short", _summary(h, results))
    _finish(h)
    assert h.figures["kills"] >= 5


def test_crash_at_every_commit_boundary_of_migrations(tmp_path, request, dedicated_server):
    """Every Migrate operation killed right after its first visible change and after each further
    intermediate commit: multi-commit migrations must still leave before- or after-states."""
    h = Harness(dedicated_server, tmp_path, rows=2000, copies=3, seed=SEED + 2, only=lambda op: op.rpc == "Migrate")
    results = []
    try:
        h.build()
        results += _boundary_kills(h, [op for op in h.ops if op.supported])
        h.final_check()
    finally:
        h.stop()
        _store(request, "migrate_boundaries", _summary(h, results))
    _finish(h)


def test_cancel_and_deadline_short(tmp_path, request, dedicated_server):
    """Client cancellation and deadline expiry mid-request on every core operation and one Migrate."""
    picks = {*CORE, "Migrate:rename_table"}
    h = Harness(dedicated_server, tmp_path, rows=4000, copies=2, seed=SEED + 1, only=lambda op: op.name in picks)
    results = []
    try:
        h.build()
        for op in h.ops:
            if op.supported:
                results.append(h.interrupt_trial(op, "cancel"))
                results.append(h.interrupt_trial(op, "deadline"))
        h.final_check()
    finally:
        h.stop()
        _store(request, "interrupt_short", {**_summary(h, results), "trials": [r["trial"] for r in results]})
    _finish(h)


@pytest.mark.slow
def test_crash_kill_long(tmp_path, request, dedicated_server):
    """Random kills spread over each request's duration (8 per core operation, 3 per Migrate operation),
    a kill at every intermediate commit of every operation, then cancellations and deadlines."""
    rounds = int(os.environ.get("CRASH_ROUNDS", "4"))
    h = Harness(dedicated_server, tmp_path, rows=10000, copies=2 * rounds + 8)
    results = []
    try:
        h.build()
        ops = [op for op in h.ops if op.supported]
        plan = []
        for r in range(rounds):
            plan += [op for op in ops for _ in range(op.weight)] if r < 3 else [op for op in ops if op.name in CORE] * 2
        for i, op in enumerate(plan):
            results.append(h.kill_trial(op, others="all" if i % 20 == 0 else "files"))
        results += _boundary_kills(h, ops)
        for op in ops:
            results.append(h.interrupt_trial(op, "cancel"))
            results.append(h.interrupt_trial(op, "deadline"))
        h.final_check()
    finally:
        h.stop()
        _store(request, "long", _summary(h, results))
    _finish(h)
    assert h.figures["kills"] >= 20
