"""STATE bookkeeping: which states wait for a commit, and how many records each covers.

A state is echoed only after every record received before it is committed; all waiting
states are echoed together, in arrival order, after a commit of everything buffered.
`destinationStats.recordCount` is the number of records of that stream since its previous
STREAM state (GLOBAL and LEGACY states: of all streams since the previous such state).
"""
from __future__ import annotations

import copy
from collections import defaultdict
from typing import Optional


class StateLedger:
    def __init__(self):
        self.pending: list[dict] = []
        self._per_stream: dict[tuple, int] = defaultdict(int)
        self._global = 0

    def record(self, key: tuple) -> None:
        self._per_stream[key] += 1
        self._global += 1

    def received(self, raw_message: dict, stream_key: Optional[tuple]) -> None:
        """`stream_key` is (namespace, name) for STREAM states, None for GLOBAL/LEGACY."""
        if stream_key is not None:
            count = self._per_stream.pop(stream_key, 0)
        else:
            count = self._global
            self._global = 0
        echo = copy.copy(raw_message)
        state = dict(echo["state"])
        stats = dict(state.get("destinationStats") or {})
        stats["recordCount"] = float(count)
        state["destinationStats"] = stats
        echo["state"] = state
        self.pending.append(echo)

    def take(self) -> list[dict]:
        out, self.pending = self.pending, []
        return out
