"""The growth plot (docs/bench-growth.png): upsert seconds and peak RSS against table size, per
engine and key distribution, with the shared delta-rs baseline."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .results import GB, engines_of, growth_upserts, is_growth_upsert, outcome, outcome_code, table_size
from .targets import TARGET_TREE_RSS
from testkit.bench_keys import DISTRIBUTIONS

ENGINE_COLORS = {"auto": "tab:green", "sail": "tab:blue", "spark": "tab:orange"}


def _mark_failures(ax, e: str, dist: str, x: list[float], g: list[dict], cap) -> None:
    for xi, r in zip(x, g):
        if r.get("server_s") is None:
            y = (r.get("server_peak_rss") or 0) / GB
            ax.plot([xi], [y], "x", color="red", ms=12, mew=2)
            what = f"killed at the {cap:g} GB cap" if outcome_code(r) == "killed" and cap else outcome(r)
            ax.annotate(f"{e} {dist}: {what}", (xi, y), textcoords="offset points", xytext=(-8, -14),
                        ha="right", fontsize=7, color="red")


def _plot_series(res: dict, times, rss) -> list[float]:
    """Every engine x distribution series (and the baseline once per distribution); the x values."""
    xs: set = set()
    baseline_drawn = set()
    for e in engines_of(res):
        for dist in DISTRIBUTIONS:
            g = sorted(growth_upserts(res, e, dist), key=table_size)
            if not g:
                continue
            x = [table_size(r) / 1e6 for r in g]
            xs.update(x)
            style, color, label = "o" + ("-" if dist == "uniform" else "--"), ENGINE_COLORS.get(e), f"{e}, {dist} keys"
            times.plot(x, [r.get("server_s") or np.nan for r in g], style, color=color, label=label)
            rss.plot(x, [(r.get("server_peak_rss") or 0) / GB for r in g], style, color=color, label=label)
            if dist not in baseline_drawn:  # one shared baseline
                baseline_drawn.add(dist)
                times.plot(x, [r.get("baseline_s") or np.nan for r in g], "s" + style[1:], color="gray", alpha=0.7,
                           label=f"delta-rs baseline, {dist} keys")
            _mark_failures(rss, e, dist, x, g, res.get("rss_cap_gb"))
    return sorted(xs)


def _label_axes(res: dict, times, rss, ticks: list[float]) -> None:
    n_rows = next(r["rows"] for r in res["results"] if is_growth_upsert(r))
    times.set_yscale("log")
    times.set_ylabel(f"seconds ({n_rows:,}-row upsert, 50% new keys; log scale)")
    times.set_title("Incremental upsert time")
    rss.axhline(TARGET_TREE_RSS / GB, color="red", lw=0.8, ls=":", label="4 GB target")
    rss.set_ylabel("GB (process tree, JVM included)")
    rss.set_title("Peak RSS during the upsert")
    for ax in (times, rss):
        ax.set_xscale("log")
        ax.set_xlabel("table size (million rows)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{v:.3g}" for v in ticks])


def plot(res: dict, path: Path) -> bool:
    """Draw the plot into `path`; False (nothing drawn) when the run had no growth upserts."""
    if not any(is_growth_upsert(r) for r in res["results"]):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (times, rss) = plt.subplots(1, 2, figsize=(12, 4.6))
    _label_axes(res, times, rss, _plot_series(res, times, rss))
    fig.suptitle(f"Growth: the incremental upsert at increasing table size, per engine and key distribution "
                 f"(scale {res['scale']:g})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
