"""The one way a door reaches its engines, without an engine: the door's calls (through DeltaCore)
reach the pool through the router, which resolves auto; the pool refuses an unresolved auto."""
from __future__ import annotations

from contextlib import contextmanager

import pytest

from delta_destination.engines.pool import EnginePool
from delta_destination.engines.router import EngineRouter
from delta_destination.settings import Settings


class Pool:
    """The pool as the router sees it: records the settings each call got."""

    def __init__(self):
        self.leased: list[tuple[str, bool]] = []
        self.asked: list[str] = []
        self.stopped = False

    @contextmanager
    def lease(self, settings, on_demand=False, small=False):
        self.leased.append((settings.engine, on_demand))
        yield object()

    def healthy(self, settings):
        self.asked.append(settings.engine)
        return True

    def answers(self, settings, on_demand=False):
        self.asked.append(settings.engine)
        return settings.engine == "sail"

    def warm_up_in_background(self, settings):
        self.asked.append(f"warm up {settings.engine}")

    def stop(self):
        self.stopped = True


def test_the_doors_engine_calls_reach_the_pool_with_auto_resolved():
    pool = Pool()
    router = EngineRouter(pool)
    auto = Settings.create("/wh", engine="auto", spark_remote="sc://127.0.0.1:1")
    router.start(auto)
    router.warm_up(auto)                           # only a configured local Spark engine is warmed up
    router.warm_up(Settings.create("/wh", engine="spark"))
    assert router.healthy(auto) and router.answers(auto)
    assert router.silent_engines(auto) == ["the Apache Spark server at sc://127.0.0.1:1"]
    router.stop()
    assert pool.leased == [("sail", True)]   # chosen by auto (a Spark engine so started would stop when idle)
    assert pool.asked == ["warm up spark", "sail", "sail", "sail", "spark"]
    assert pool.stopped


def test_the_pool_refuses_engine_auto():
    pool = EnginePool()
    try:
        with pytest.raises(ValueError, match="unresolved"):
            with pool.lease(Settings.create("/wh", engine="auto")):
                pass
    finally:
        pool.stop()
