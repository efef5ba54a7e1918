"""Shared fixtures: a real server process on a free port, and gRPC stubs to it."""
from __future__ import annotations

import os

import pytest

from testkit.server_process import TEST_ENGINES, RunningServer


@pytest.fixture(scope="session", params=TEST_ENGINES)
def engine(request):
    """The engine acceptance tests run against; every test that uses it runs once per engine."""
    return request.param


@pytest.fixture(scope="session")
def server(tmp_path_factory, engine):
    """One server per engine for the whole session (engine start-up is the slow part)."""
    base = tmp_path_factory.mktemp(f"srv-{engine}")
    srv = RunningServer(base / "warehouse", base / "server.log", engine=engine)
    yield srv
    srv.stop()


@pytest.fixture
def stub(server):
    return server.stub


@pytest.fixture
def unique_schema(request):
    """A schema name unique to the test, so tests sharing the server do not collide."""
    import hashlib

    name = request.node.nodeid
    safe = "".join(ch if ch.isalnum() else "_" for ch in request.node.name.lower())[:40]
    return f"t_{safe}_{hashlib.sha1(name.encode()).hexdigest()[:8]}_{os.getpid()}"


@pytest.fixture
def engine_server(server):
    """The session's server of the engine under test (see `engine`)."""
    return server


# On the Spark engine some hostile-names replays run only in `make test-slow`: the live variant
# of the tester-input replays (the history variant covers each file's live tables too) and the
# Parquet-format replays (the batch format is decided before the engine; both engines read the
# same Arrow). Everything runs on Sail. CI's hour does not hold every replay twice on both engines.
SLOW_ON_SPARK = {"test_tester_input_with_hostile_names": "-live]", "test_parquet_batches_with_hostile_names": "]"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        suffix = SLOW_ON_SPARK.get(getattr(item, "originalname", ""))
        if suffix and "[spark" in item.nodeid and item.nodeid.endswith(suffix):
            item.add_marker(pytest.mark.slow)
