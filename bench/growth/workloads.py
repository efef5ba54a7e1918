"""The benchmark's workloads: which files each one sends (keys from testkit/bench_keys.py, files from
data.py) and the steps that send them, on every engine's server and once on the baseline
(steps.Bench.step measures each step)."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..common import data as bd
from ..common.baseline import file_refs
from ..common.rpc import create_table, describe_table, soft_truncate, write_batch, write_history_batch
from .steps import Bench
from testkit.bench_keys import DISTRIBUTIONS, sample_recent, sample_uniform, shuffled

NEW_KEY_BASE = 10 ** 12               # upserts' new keys, far above the appended 0..size-1
RECENT_NEW_KEY_OFFSET = 5 * 10 ** 8   # the "recent" upserts' new keys, apart from the uniform ones'

WIDE_CHAIN = ["initial_load", "upsert", "partial_update", "hard_delete", "soft_truncate"]
WORKLOADS = WIDE_CHAIN + ["narrow_load", "history", "growth"]
CHAINS = {  # a workload needs the ones before it in its chain
    **{w: WIDE_CHAIN[:i + 1] for i, w in enumerate(WIDE_CHAIN)},
    "narrow_load": ["narrow_load"],
    "history": ["history"],
    "growth": ["growth"],
}


def selected_chain(only: str | list[str] | None, skip_growth: bool) -> list[str]:
    """The workloads to run, in order: `only` (one or several) and what they need first (default: all)."""
    chain: list[str] = []
    wanted = [only] if isinstance(only, str) else only
    for w in [x for x in WORKLOADS if x in wanted] if wanted else WORKLOADS:
        if w == "growth" and skip_growth:
            continue
        chain += [x for x in CHAINS[w] if x not in chain]
    return chain


@dataclass(frozen=True)
class Sizes:
    """Row counts at the run's scale."""

    base: int          # the wide tables' initial load (1M)
    batch: int         # an incremental upsert / update / delete (100k)
    narrow: int        # the narrow load (2M)
    growth: list[int]  # the growth table's sizes (1M, 3M, 10M)
    per_request: int   # rows per WriteBatch when loading or appending (1M)

    @classmethod
    def at_scale(cls, gen: bd.Generator) -> Sizes:
        return cls(base=gen.n(1_000_000), batch=gen.n(100_000), narrow=gen.n(2_000_000),
                   growth=[gen.n(1_000_000), gen.n(3_000_000), gen.n(10_000_000)],
                   per_request=gen.n(bd.ROWS_PER_REQUEST))


# ---- the files ------------------------------------------------------------------------------------

def _wide_files(gen: bd.Generator, want: set, s: Sizes) -> dict:
    f = {}
    if want & {*WIDE_CHAIN, "growth"}:
        f["init"] = gen.wide_rows("init", np.arange(s.base, dtype=np.int64), 0)
    if want & {*WIDE_CHAIN[1:], "growth"}:
        ids = np.concatenate([sample_uniform(gen.seed, "upsert", s.batch // 2, s.base),
                              NEW_KEY_BASE + np.arange(s.batch - s.batch // 2, dtype=np.int64)])
        f["upsert"] = gen.wide_rows("upsert", shuffled(gen.seed, "upsert", ids), 1)
    if want & set(WIDE_CHAIN[2:]):
        keys = shuffled(gen.seed, "update", sample_uniform(gen.seed, "update", s.batch, s.base))
        f["update"] = gen.wide_rows("update", keys, 2, kind="update", unmod_frac=0.7)
    if want & set(WIDE_CHAIN[3:]):
        keys = shuffled(gen.seed, "delete", sample_uniform(gen.seed, "delete", s.batch, s.base))
        f["delete"] = gen.keys_only("delete", keys, 3, "delete", {"_fivetran_synced": bd.sync_ms(3)})
    return f


def _history_files(gen: bd.Generator, s: Sizes) -> dict:
    keys = shuffled(gen.seed, "hist", sample_uniform(gen.seed, "hist", s.batch, s.base))
    return {
        "hist_init": gen.wide_rows("hist_init", np.arange(s.base, dtype=np.int64), 0, table=bd.HISTORY,
                                   history={"start_ms": bd.sync_ms(0)}),
        "hist_earliest": gen.keys_only("hist_earliest", keys, 1, "earliest", {"_fivetran_start": bd.sync_ms(1)}),
        "hist_versions": gen.wide_rows("hist_versions", keys, 1, table=bd.HISTORY,
                                       history={"start_ms": bd.sync_ms(1)}),
    }


def _growth_files(gen: bd.Generator, s: Sizes) -> dict:
    """Appends up to each size, and at each size a uniform and a "recent" upsert (90% of the existing
    keys among the newest 10% of the appended keys 0..size-1; new keys in their own range)."""
    f = {}
    for i, size in enumerate(s.growth):
        if i:
            f[f"g_append_{i}"] = gen.wide_rows(f"g_append_{i}", np.arange(s.growth[i - 1], size, dtype=np.int64),
                                               4 + i)
            name = f"g_upsert_{i}"
            ids = np.concatenate([sample_uniform(gen.seed, name, s.batch // 2, size),
                                  NEW_KEY_BASE + i * 10 ** 9 + np.arange(s.batch - s.batch // 2, dtype=np.int64)])
            f[name] = gen.wide_rows(name, shuffled(gen.seed, name, ids), 5 + i)
        name = f"g_recent_{i}"
        ids = np.concatenate([sample_recent(gen.seed, name, s.batch // 2, size),
                              NEW_KEY_BASE + i * 10 ** 9 + RECENT_NEW_KEY_OFFSET
                              + np.arange(s.batch - s.batch // 2, dtype=np.int64)])
        f[name] = gen.wide_rows(name, shuffled(gen.seed, name, ids), 5 + i)
    return f


def workload_files(gen: bd.Generator, selected: list[str], s: Sizes) -> dict[str, list[bd.FileSpec]]:
    """Every selected workload's batch files by group (generated on first use, then cached)."""
    want = set(selected)
    f = _wide_files(gen, want, s)
    if "narrow_load" in want:
        f["narrow"] = gen.narrow_rows("narrow", np.arange(s.narrow, dtype=np.int64), 0)
    if "history" in want:
        f.update(_history_files(gen, s))
    if "growth" in want:
        f.update(_growth_files(gen, s))
    return f


@dataclass(frozen=True)
class Plan:
    """What a run sends: the workloads in order, the row counts, the files by group."""

    selected: list[str]
    sizes: Sizes
    files: dict[str, list[bd.FileSpec]]


def plan(gen: bd.Generator, only: str | list[str] | None, skip_growth: bool) -> Plan:
    """The run's workloads and their files (generating what the cache lacks)."""
    selected, sizes = selected_chain(only, skip_growth), Sizes.at_scale(gen)
    return Plan(selected, sizes, workload_files(gen, selected, sizes))


# ---- the steps ------------------------------------------------------------------------------------

def _baseline(bench: Bench, command: str, table: str, **files) -> Callable[[], dict]:
    """The baseline worker's `command` on its copy of `table`, with file groups by keyword."""
    refs = {k: file_refs(v) for k, v in files.items()}
    return lambda: bench.bl.call(command, path=bench.bl_path(table), table=table, **refs)


def create_everywhere(bench: Bench, table) -> None:
    """The table on every engine's server and on the baseline."""
    for e in bench.engines:
        bench.engine = e
        create_table(bench.stub, table)
    bench.bl.call("create", path=bench.bl_path(table.name), table=table.name)


# workload, its file group, the WriteBatch argument, the baseline command, the rows stored before it
_INCREMENTAL = [
    ("upsert", "upsert", "replace", "upsert", lambda s: s.base),
    ("partial_update", "update", "update", "update", lambda s: s.base + s.batch // 2),
    ("hard_delete", "delete", "delete", "delete", lambda s: s.base + s.batch // 2),
]


def run_wide_chain(bench: Bench, p: Plan) -> None:
    """The initial load, then the incremental steps on the same table, on the engines it succeeded on."""
    W, s, f = bd.WIDE, p.sizes, p.files
    chain = [w for w in WIDE_CHAIN if w in p.selected]
    if not chain:
        return
    create_everywhere(bench, W)
    out = bench.step("initial_load", rows=s.base, specs=f["init"], table="wide", table_size=0,
                     server_fn=lambda: write_batch(bench.stub, W, replace=f["init"], label="initial_load"),
                     baseline_fn=_baseline(bench, "load", "wide", files=f["init"]))
    engines = [e for e, r in out.items() if r.get("server_s") is not None]
    if not engines:
        return
    for workload, group, kind, command, size in _INCREMENTAL:
        if workload in chain:
            bench.step(workload, rows=s.batch, specs=f[group], table="wide", table_size=size(s), engines=engines,
                       server_fn=lambda w=workload, g=group, k=kind: write_batch(bench.stub, W, label=w, **{k: f[g]}),
                       baseline_fn=_baseline(bench, command, "wide", files=f[group]))
    if "soft_truncate" in chain:
        _soft_truncate(bench, engines)


def _soft_truncate(bench: Bench, engines: list[str]) -> None:
    size = bench.bl.call("count", path=bench.bl_path("wide"))["rows"]
    before = dt.datetime.fromtimestamp(bd.TRUNCATE_BEFORE_MS / 1000, dt.timezone.utc)
    bench.step("soft_truncate", rows=size, table="wide", table_size=size, engines=engines,
               server_fn=lambda: soft_truncate(bench.stub, bd.WIDE, bd.TRUNCATE_BEFORE_MS, label="soft_truncate"),
               baseline_fn=lambda: bench.bl.call("soft_truncate", path=bench.bl_path("wide"),
                                                 before_iso=before.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                                                 synced="_fivetran_synced", deleted="_fivetran_deleted"))


def run_narrow(bench: Bench, p: Plan) -> None:
    T, f = bd.NARROW, p.files
    create_everywhere(bench, T)
    bench.step("narrow_load", rows=sum(s.rows for s in f["narrow"]), specs=f["narrow"], table="events",
               table_size=0, server_fn=lambda: write_batch(bench.stub, T, replace=f["narrow"], label="narrow_load"),
               baseline_fn=_baseline(bench, "load", "events", files=f["narrow"]))


def run_history(bench: Bench, p: Plan) -> None:
    H, s, f = bd.HISTORY, p.sizes, p.files
    create_everywhere(bench, H)
    out = bench.step("history: initial load (setup)", rows=s.base, specs=f["hist_init"], table="hist",
                     table_size=0, setup=True,
                     server_fn=lambda: write_history_batch(bench.stub, H, replace=f["hist_init"], label="history_load"),
                     baseline_fn=_baseline(bench, "load", "hist", files=f["hist_init"]))
    engines = [e for e, r in out.items() if r.get("server_s") is not None]
    if engines:
        bench.step("history", rows=s.batch, specs=f["hist_earliest"] + f["hist_versions"], table="hist",
                   table_size=s.base, engines=engines,
                   server_fn=lambda: write_history_batch(bench.stub, H, earliest=f["hist_earliest"],
                                                         replace=f["hist_versions"], label="history"),
                   baseline_fn=_baseline(bench, "history", "hist", earliest=f["hist_earliest"],
                                         replace=f["hist_versions"]))


class _Growth:
    """The growth series on every engine. An engine whose append through the server fails (e.g.
    killed at the RSS cap) gets the rest of its table appended with delta-rs straight into its
    warehouse, so its upserts can still be measured."""

    def __init__(self, bench: Bench, p: Plan):
        self.bench = bench
        self.f = p.files
        self.sizes = p.sizes
        self.table = bd.TABLES["growth"]
        self.direct = {e: False for e in bench.engines}  # engine -> its appends bypass the server
        self.compare = bench.args.scale <= 0.05  # compare the tables after every append on small runs

    def append_direct(self, req: list) -> None:
        self.bench.bl.call("load", path=self.bench.srv_path("growth"), table="growth", files=file_refs(req))

    def append(self, group: str, size_before: int, label: str) -> None:
        """The group's files, one request of about 1M rows at a time (setup steps)."""
        for j, req in enumerate(bd.chunked(self.f[group], self.sizes.per_request)):
            rows = sum(s.rows for s in req)
            self._append_request(f"growth_{group}_{j}", req, rows,
                                 f"growth: append {rows:,} rows at {size_before:,} ({label} {j + 1})", size_before)
            size_before += rows

    def _append_request(self, label: str, req: list, rows: int, name: str, size_before: int) -> None:
        was_direct = dict(self.direct)

        def server_fn() -> None:
            if self.direct[self.bench.engine]:
                self.append_direct(req)
            else:
                write_batch(self.bench.stub, self.table, replace=req, label=label)

        out = self.bench.step(name, rows=rows, specs=req, setup=True, table_size=size_before,
                              table="growth" if self.compare else None, server_fn=server_fn,
                              baseline_fn=_baseline(self.bench, "load", "growth", files=req))
        for e, r in out.items():
            if was_direct[e]:
                r["workload"] += " [delta-rs direct]"
                r["direct"] = True
            elif r.get("server_s") is None:
                self._fall_back(e, name, req, rows, size_before)

    def _fall_back(self, engine: str, name: str, req: list, rows: int, size_before: int) -> None:
        self.direct[engine] = True
        self.bench.events.append(f"{engine}: growth WriteBatch append failed at {size_before:,} rows; the rest of its "
                                 "growth table is appended with delta-rs directly into its warehouse")
        out = self.bench.step(name + " [delta-rs direct, after the server failed]", rows=rows, specs=req, setup=True,
                              table_size=size_before, baseline_fn=None, engines=[engine],
                              server_fn=lambda: self.append_direct(req))
        out[engine]["direct"] = True

    def upsert(self, i: int, size: int, dist: str, stored: int) -> None:
        """One measured upsert at this size, on freshly started servers (same warehouses)."""
        group = f"g_recent_{i}" if dist == "recent" else ("upsert" if i == 0 else f"g_upsert_{i}")
        for e in self.bench.engines:
            self.bench.engine = e
            self.bench.restart_server(f"(fresh server for the growth upsert at {size:,} rows, {dist})")
            # warm-up outside the measurement: the first request on a new server reads the table's metadata
            describe_table(self.bench.stub, self.table)
        self.bench.step(f"growth: upsert at {size / 1e6:g}M ({dist})", rows=self.sizes.batch,
                        specs=self.f[group], table="growth", table_size=stored,
                        extra={"growth_size": size, "distribution": dist},
                        server_fn=lambda: write_batch(self.bench.stub, self.table, replace=self.f[group],
                                                      label=f"growth_upsert_{i}_{dist}"),
                        baseline_fn=_baseline(self.bench, "upsert", "growth", files=self.f[group]))


def run_growth(bench: Bench, p: Plan) -> None:
    """Grow one wide table per engine 1M -> 3M -> 10M with 1M-row WriteBatch appends (the initial-load
    path) and at each size measure two 100k upserts, first with existing keys uniform over the table,
    then with 90% of them among the newest 10% of keys; each upsert on freshly started servers so the
    peak RSS belongs to that upsert at that table size (what a long-running server accumulates shows in
    the setup steps). The baseline applies every file once."""
    growth = _Growth(bench, p)
    create_everywhere(bench, growth.table)
    sizes, s = p.sizes.growth, p.sizes
    growth.append("init", 0, "load")
    new_keys = 0  # added by the upserts so far
    for i, size in enumerate(sizes):
        if i:
            growth.append(f"g_append_{i}", sizes[i - 1] + new_keys, "append")
        for dist in DISTRIBUTIONS:
            growth.upsert(i, size, dist, size + new_keys)
            new_keys += s.batch - s.batch // 2


def run_workloads(bench: Bench, p: Plan) -> None:
    run_wide_chain(bench, p)
    for workload, run in (("narrow_load", run_narrow), ("history", run_history), ("growth", run_growth)):
        if workload in p.selected:
            run(bench, p)
