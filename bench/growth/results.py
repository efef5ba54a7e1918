"""Reading a benchmark result (the dict bench-results.json holds) and spelling its figures, shared by
the targets, the plot and the report. Results of runs before issue 8 measured embedded Sail only
and have no engine fields: they read as Sail."""
from __future__ import annotations

from typing import Optional

GB = 1024 ** 3

OUTCOMES = {"ok": "ok", "killed": "killed at the RSS cap", "refused": "refused by the guard",
            "died": "server died", "failed": "failed"}


def engines_of(res: dict) -> list[str]:
    return res.get("engines") or ["sail"]


def per_engine(res: dict, key: str) -> dict:
    """An engine -> value field (older results held one value, Sail's)."""
    v = res.get(key)
    return v if isinstance(v, dict) else {"sail": v}


def engine_of(r: dict) -> str:
    return r.get("engine", "sail")


def is_growth_upsert(r: dict) -> bool:
    return r["workload"].startswith("growth: upsert")


def growth_upserts(res: dict, engine: str, dist: Optional[str] = None) -> list[dict]:
    """The engine's measured growth upserts (of one key distribution, or all)."""
    g = [r for r in res["results"] if is_growth_upsert(r) and engine_of(r) == engine]
    return [r for r in g if dist is None or r.get("distribution", "uniform") == dist]


def table_size(r: dict) -> int:
    """The rows the table held when the step ran (a growth upsert: its nominal size)."""
    return r.get("growth_size") or r["table_size"]


def outcome_code(r: dict) -> str:
    """ok | killed (at the RSS cap) | refused (by the memory guard) | died | failed."""
    if r.get("server_outcome"):
        return r["server_outcome"]
    if r.get("server_s") is not None:
        return "ok"
    return "killed" if "killed by the benchmark" in (r.get("server_error") or "") else "failed"


def outcome(r: dict) -> str:
    o = outcome_code(r)
    return OUTCOMES.get(o, o)


def short(v) -> str:
    """A figure for a progress line: 3 significant digits, or thousands separated."""
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def gb(b) -> str:
    return "-" if not b else f"{b / GB:.2f} GB"


def seconds(x) -> str:
    return "FAILED" if x is None else f"{x:.2f}"


def rate(x) -> str:
    return "-" if not x else f"{x:,.0f}"


def ratio(x) -> str:
    return "-" if not x else f"{x:.2f}x"


def millions(rows: int) -> str:
    return f"{rows / 1e6:g}M"
