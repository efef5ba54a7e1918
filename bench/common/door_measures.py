"""What the soak runs measure, shared by the doors' runs (bench/soak/run.py: Fivetran; bench/soak/doors.py:
Airbyte and Conduit) and bench/sync/run.py: latency percentiles, the door's metrics endpoint (engine
restarts by cause), and the memory figures a run is judged on."""
from __future__ import annotations

import statistics
import urllib.request

from .process_memory import MIB, MemorySampler


def percentile(values: list[float], q: float) -> float:
    """
    >>> percentile([1, 2, 3, 4], 0.5), percentile([1.0], 0.95)
    (2.5, 1.0)
    """
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


def latency_summary(values: list[float]) -> dict:
    return {"n": len(values), "p50_s": round(percentile(values, 0.5), 3), "p95_s": round(percentile(values, 0.95), 3),
            "max_s": round(max(values), 3)} if values else {"n": 0}


def scrape(port: int) -> dict[str, float]:
    """The door's metrics endpoint: sample name + labels -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    except OSError:
        return {}
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def restarts(metrics: dict[str, float]) -> dict[str, int]:
    """Engine restarts by cause, from a scrape."""
    out: dict[str, int] = {}
    for key, value in metrics.items():
        if key.startswith("delta_destination_engine_restarts_total{") and value:
            cause = key.split("cause=", 1)[1].split(",", 1)[0].rstrip("}")
            out[cause] = out.get(cause, 0) + int(value)
    return out


def replacements_per_1000(result: dict) -> float:
    """Engine replacements (memory, requests: not crashes) per 1,000 requests (commits) of a soak run.
    >>> replacements_per_1000({"commits": 400, "engine_restarts": {"memory": 50, "crash": 1}})
    125.0
    """
    commits = result.get("write_batches", result.get("commits")) or 0
    replaced = sum(n for cause, n in (result.get("engine_restarts") or {}).items() if cause in ("memory", "requests"))
    return 1000.0 * replaced / commits if commits else 0.0


def memory_summary(sampler: MemorySampler, checkpoint: int) -> dict:
    """The figures the target is judged on: PSS after `checkpoint` requests, at the end, the peak, and
    the series (MiB) for the plot."""
    early, end, peak = sampler.at_progress(checkpoint), sampler.samples[-1], sampler.peak()
    mib = lambda b: round(b / MIB, 1)  # noqa: E731
    return {
        "checkpoint_requests": early.progress, "pss_at_checkpoint_mib": mib(early.total),
        "pss_end_mib": mib(end.total), "end_over_checkpoint": round(end.total / early.total, 3),
        "pss_peak_mib": mib(peak.total), "peak_at_requests": peak.progress,
        "end_by_role_mib": {k: mib(v) for k, v in end.pss.items()},
        "series": [[s.seconds, s.progress, mib(s.total), mib(s.pss.get("door", 0)), mib(s.pss.get("engine", 0))]
                   for s in sampler.samples],
    }
