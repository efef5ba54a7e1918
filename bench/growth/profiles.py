"""The benchmark's profiles: the initial load and the upsert again on an embedded-Sail server with
pyinstrument inside its handlers (bench/growth/profile_server.py), summed into phases.

The Spark engine's time is in its JVM, which pyinstrument cannot see, so only Sail is profiled.
The phases name functions of delta_destination (and of the Spark Connect client): when the package
renames one, its phase shows nothing until PHASES follows.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable

from ..common import data as bd
from ..common.rpc import RpcFailed, create_table, write_batch
from testkit.server_process import RunningServer


def _is(fn: str, frag: str):
    def match(fr, ancestors) -> bool:
        return fr.function == fn and frag in (fr.file_path or "")
    return match


# engine calls that are not the write statement itself
_NOT_THE_STATEMENT = {"staged", "staged_as_parquet", "staged_in_chunks", "describe", "stored_metadata", "table_name", "_current_versions"}


def _statement(fr, ancestors) -> bool:
    """The engine call that applies the batch (MERGE, or the INSERT fast path, and the key probe
    before it): run_engine outside staging, describe, metadata and naming."""
    return (fr.function == "run_engine" and "engines/errors.py" in (fr.file_path or "")
            and not any(a.function in _NOT_THE_STATEMENT for a in ancestors))


PHASES = [  # (label, matcher): the outermost matching frames are summed; phases may nest (staging holds uploads)
    ("describe table (schema + metadata)", _is("describe", "core/registry.py")),
    # the files are read on worker threads: the handler thread waits in BatchFiles.read
    ("read batch files (decrypt, zstd, CSV, convert)", _is("read", "fivetran/batches.py")),
    ("stack into merge source", _is("merge_source", "core/writer.py")),
    ("duplicate-key check", _is("check_duplicates", "core/writer.py")),
    ("catalog name of the table", _is("table_name", "engines/session.py")),
    ("key ranges from the Delta log (no engine)", _is("keys_cannot_match", "core/key_ranges.py")),
    ("history: read current versions", _is("_current_versions", "core/history.py")),
    ("history: plan actions", _is("actions", "core/history.py")),
    ("ship source: staged (> 64 MB)", lambda fr, anc: fr.function in ("staged_as_parquet", "staged_in_chunks")
                                                      and "engines/shipping.py" in (fr.file_path or "")),
    ("ship source: createDataFrame (client side)", _is("createDataFrame", "session.py")),
    ("ship source: temp view (sends a local relation)", _is("createOrReplaceTempView", "dataframe.py")),
    ("key probe + MERGE / INSERT statement in the engine (client waits)", _statement),
]


def _outermost_time(root, match: Callable) -> float:
    found: list[float] = []

    def walk(fr, ancestors):
        if match(fr, ancestors):
            found.append(fr.time)
            return
        for ch in fr.children:
            walk(ch, ancestors + [fr])

    walk(root, [])
    return sum(found)


def _self_times(root) -> dict[str, float]:
    """Seconds spent in each frame itself (where the CPU or the wait actually is)."""
    selfs: dict[str, float] = {}

    def leaves(fr, parent=None):
        own = fr.time - sum(c.time for c in fr.children)
        if own > 0:
            # pyinstrument puts a frame's own time in a synthetic "[self]" child: name it by the real frame
            real = parent if (fr.function or "").startswith("[") and parent is not None else fr
            key = f"{real.function} ({Path(real.file_path or '?').name}:{real.line_no})"
            selfs[key] = selfs.get(key, 0.0) + own
        for c in fr.children:
            leaves(c, fr)

    leaves(root)
    return selfs


def summarize_profile(session_path: Path, text_path: Path) -> dict:
    """Phase totals from a pyinstrument session, plus the top of its text tree."""
    out = {"tree": "", "phases": [], "total": None}
    if text_path.exists():
        out["tree"] = "\n".join(text_path.read_text().splitlines()[:70])
    if not session_path.exists():
        return out
    from pyinstrument.session import Session

    root = Session.load(str(session_path)).root_frame()
    if root is None:
        return out
    total = out["total"] = root.time
    share = lambda s: s / total if total else None  # noqa: E731
    for label, match in PHASES:
        acc = _outermost_time(root, match)
        if acc:
            out["phases"].append({"phase": label, "seconds": acc, "share": share(acc)})
    top = sorted(_self_times(root).items(), key=lambda kv: -kv[1])[:12]
    out["self_top"] = [{"frame": k, "seconds": v, "share": share(v)} for k, v in top]
    return out


def run_profiles(tmp: Path, f: dict, log: Callable[[str], None]) -> dict:
    """Initial load and incremental upsert again, on a fresh embedded-Sail server under pyinstrument;
    label -> seconds under the profiler and the summary (or the error)."""
    out_dir = tmp / "profiles"
    log("profiling: sail server under pyinstrument (initial load, upsert)")
    srv = RunningServer(tmp / "warehouse-profile", tmp / "server-profile.log", engine="sail", ready_timeout=300,
                        command=[sys.executable, "-m", "bench.growth.profile_server"],
                        env={"BENCH_PROFILE_DIR": str(out_dir)})
    prof = {}
    try:
        create_table(srv.stub, bd.WIDE)
        for label, group in (("initial_load", "init"), ("upsert", "upsert")):
            t = time.perf_counter()
            try:
                write_batch(srv.stub, bd.WIDE, label=label, replace=f[group])
            except RpcFailed as e:
                prof[label] = {"error": str(e)}
                continue
            took = time.perf_counter() - t
            prof[label] = {"seconds": took, **summarize_profile(out_dir / f"{label}.pyisession",
                                                                 out_dir / f"{label}.txt")}
            log(f"  {label}: {took:.1f}s under the profiler")
    finally:
        srv.stop()
    return prof
