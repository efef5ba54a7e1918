"""The benchmark's keys: which rows each workload's files touch (bench/common/data.py writes the
files, bench/growth/workloads.py picks the keys). Every draw is derived from the seed and the name of
the draw alone, so a cached workload can be regenerated identically and the draws tested exactly.
"""
from __future__ import annotations

import numpy as np

DISTRIBUTIONS = ("uniform", "recent")  # the growth upserts' existing keys, in the order they run at each size
RECENT_NEWEST = 0.10  # the "recent" growth upserts: 90% of the existing keys they update are
RECENT_SHARE = 0.90   # among the newest 10% of the table's keys, the rest uniform over the older 90%


def keyed_rng(seed: int, name: str, part: int = 0) -> np.random.Generator:
    """The random generator of one named draw (`part` tells apart draws of the same name)."""
    h = int.from_bytes(name.encode()[:16].ljust(16, b"\0"), "little")
    return np.random.default_rng([seed, h % (2 ** 63), part])


def sample_uniform(seed: int, name: str, count: int, upto: int) -> np.ndarray:
    """`count` distinct keys of 0..upto-1, uniformly, sorted."""
    return np.sort(keyed_rng(seed, name, 5).choice(upto, size=count, replace=False)).astype(np.int64)


def sample_recent(seed: int, name: str, count: int, upto: int, *, newest: float = RECENT_NEWEST,
                  share: float = RECENT_SHARE) -> np.ndarray:
    """`count` distinct keys of 0..upto-1 where `share` of them fall among the newest `newest`
    fraction of keys (keys are appended in increasing order, so the newest are the largest) and the
    rest uniformly among the older ones: most Fivetran updates hit recently created rows."""
    rng = keyed_rng(seed, name, 7)
    cut = upto - max(1, int(upto * newest))
    n_recent = min(int(round(count * share)), upto - cut)
    recent = cut + rng.choice(upto - cut, size=n_recent, replace=False)
    old = rng.choice(cut, size=count - n_recent, replace=False)
    return np.sort(np.concatenate([recent, old])).astype(np.int64)


def shuffled(seed: int, name: str, keys: np.ndarray) -> np.ndarray:
    """The keys in a random order (a batch file's rows are in no key order)."""
    return keyed_rng(seed, name, 6).permutation(keys)
