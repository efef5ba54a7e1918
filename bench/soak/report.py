"""The soak's section of docs/benchmarks.md and its memory plot (docs/soak-memory.png)."""
from __future__ import annotations

from pathlib import Path

from testkit.server_process import ROOT

from delta_destination.settings import DEFAULT_ENGINE_MAX_MEMORY_MB, DEFAULT_ENGINE_MEMORY_HEADROOM_MB

from ..common.report_sections import splice
from ..common.door_measures import replacements_per_1000

DOCS = ROOT / "docs"
HEADING = "## Soak: thousands of small batches on one process (memory, latency, restarts)"
PLOT = DOCS / "soak-memory.png"


def _latency(r: dict) -> str:
    parts = []
    for kind, s in r.get("latency", {}).items():
        if s.get("n"):
            parts.append(f"{kind} {s['p50_s']:.2f} / {s['p95_s']:.2f} / {s['max_s']:.2f} s (n={s['n']})")
    return "; ".join(parts)


# The documented cap of a door's process tree, which does not depend on the number of commits
# (docs/engine-memory.md): the door process (up to ~256 MiB), the engine process up to its bound
# (engine_max_memory_mb, the door's default; where the door derives it: a warm engine, ~160 MiB for
# a pipeline's few tables, + the headroom) and a fresh engine process (~160 MiB) for the seconds a
# replacement overlaps the old process's last request.
DOOR_ALLOWANCE_MIB, FRESH_ENGINE_MIB = 256, 160


def cap_mib(door: str) -> int:
    """
    >>> cap_mib("fivetran"), cap_mib("conduit")
    (1440, 832)
    """
    headroom = DEFAULT_ENGINE_MEMORY_HEADROOM_MB[door]
    bound = min(FRESH_ENGINE_MIB + headroom, DEFAULT_ENGINE_MAX_MEMORY_MB[door]) if headroom \
        else DEFAULT_ENGINE_MAX_MEMORY_MB[door]
    return DOOR_ALLOWANCE_MIB + bound + FRESH_ENGINE_MIB


def _cap(r: dict) -> str:
    """This checkout's cap; none for a run of another commit's door (its defaults were its own).
    >>> _cap({"door": "conduit", "label": "generator pipeline, at 87311fd"}), _cap({"door": "conduit", "label": "x"})
    ('-', '832')
    """
    label = r.get("label", "")
    return "-" if label.startswith("at ") or ", at " in label else str(cap_mib(r["door"]))


def lines_for(results: list[dict]) -> list[str]:
    out = [HEADING, "",
           "One door process per row, fed for its whole life by `make bench-soak` (`python -m bench.soak`): memory is "
           "the PSS of the process tree (the door process and its Sail engine process), sampled every 5 s (a backlog: "
           "every second); latency is "
           "p50 / p95 / max; restarts are the engine replacements the door's metrics endpoint counted (cause: "
           "memory = its resident set passed its bound: `engine_max_memory_mb`, or in a Conduit connector its own "
           "size once warm + `engine_memory_headroom_mb`; crash), and per 1,000 requests (commits; memory and "
           "requests causes). Tables are read back with delta-rs and "
           "compared with the reference model (Fivetran, Airbyte) or the replayed stream (Conduit). The cap is the bound "
           "that does not depend on the number of commits (door process 256 MiB + the door's default engine bound "
           "(a derived one: a warm engine 160 MiB + the headroom) + a fresh engine process 160 MiB during a "
           "replacement; docs/engine-memory.md): "
           "with an engine replaced in a sawtooth, where the end sample falls on the tooth decides end / first 500, "
           "the peak against the cap is the target. Rows \"at REV\" ran that commit's door on the same workload, "
           "just before the row under them (no cap: that commit's defaults were its own).", "",
           "| door (run) | date | commits | seconds | PSS after the first 500 (MiB) | PSS at the end | end / first 500 "
           "| peak | cap | engine restarts | replaced per 1,000 requests | failed | tables equal | latency |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---|"]
    for r in results:
        m = r["memory"]
        commits = r.get("write_batches", r.get("commits"))
        out.append(f"| {r['door']} ({r.get('label', '')}) | {r.get('date', '')} | {commits} | {r['seconds']} | "
                   f"{m['pss_at_checkpoint_mib']:.0f} (at {m['checkpoint_requests']}) | {m['pss_end_mib']:.0f} | "
                   f"{m['end_over_checkpoint']:.2f} | {m['pss_peak_mib']:.0f} | {_cap(r)} | "
                   f"{r['engine_restarts'] or 'none'} | {replacements_per_1000(r):.1f} | "
                   f"{r['failed_requests']} | {'yes' if r['tables_equal_to_model'] else 'NO'} | {_latency(r)} |")
    out += ["", f"![PSS of each door's process tree over its run]({PLOT.name})", ""]
    return out


def plot(results: list[dict], path: Path = PLOT) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for r in results:
        series = r["memory"]["series"]
        ax.plot([s[1] for s in series], [s[2] for s in series], label=f"{r['door']} ({r.get('label', '')}): tree")
        ax.plot([s[1] for s in series], [s[4] for s in series], linestyle=":", label=f"{r['door']}: engine process")
    ax.set_xlabel("requests / commits (Conduit: records acked) so far")
    ax.set_ylabel("PSS (MiB)")
    ax.set_xscale("symlog")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_section(results: list[dict]) -> None:
    splice(DOCS / "benchmarks.md", lines_for(results))
    plot(results)
