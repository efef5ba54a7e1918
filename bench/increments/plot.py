"""`python -m bench.increments.plot`: latency of one small request against the table's size.

Drawn from docs/increments-results.json (what `make bench-increments` saved), into
docs/bench-increments.png: the p50 of each kind of request in the newest saved run of the current code per engine setting (solid)
and delta-rs's own MERGE on a copy of the same table (dashed), both axes logarithmic, so a cost that
grows with the table shows as a rising line and one that does not as a flat one.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from testkit.server_process import ROOT

RESULTS = ROOT / "docs" / "increments-results.json"
PLOT = ROOT / "docs" / "bench-increments.png"
KINDS = ("uniform", "recent", "partial")


def series(runs: list[dict], code: str = "new") -> dict[str, list[tuple[int, float]]]:
    """(rows, p50 s) per line label: one per kind of the newest run of the code `code` names ("new ..."
    runs) per engine setting (older runs ran on a loaded machine: docs/benchmarks.md), plus
    each kind's floor."""
    newest: dict[str, dict] = {}
    for run in runs:
        if str(run.get("code", "")).startswith(code) and run["date"] >= newest.get(run["engine"], {}).get("date", ""):
            newest[run["engine"]] = run
    lines: dict[str, list[tuple[int, float]]] = {}
    for run in newest.values():
        label = f"{run['engine']} {run['code_label']} ({run['date'][:10]})"
        for size in run["sizes"]:
            for kind in KINDS:
                got = size["kinds"].get(kind)
                if got:
                    lines.setdefault(f"{label} {kind}", []).append((size["size"], got["p50_s"]))
                floor = (size.get("floor") or {}).get(kind)
                if isinstance(floor, dict) and floor.get("p50_s"):
                    lines.setdefault(f"delta-rs MERGE {kind}", []).append((size["size"], floor["p50_s"]))
    return {k: sorted(set(v)) for k, v in lines.items()}


def main() -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = series(json.loads(RESULTS.read_text()))
    if not lines:
        print("no saved runs of the current code", file=sys.stderr)
        return 1
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, points in sorted(lines.items()):
        xs, ys = zip(*points)
        ax.plot(xs, ys, "--" if label.startswith("delta-rs") else "-", marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("table rows")
    ax.set_ylabel("p50 seconds per request")
    ax.set_title("One small request (100-row upsert; 20 partial updates + 5 deletes) against table size")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)
    print(PLOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
