"""Shared fixtures: a real server process on a free port, and gRPC stubs to it."""
from __future__ import annotations

import os

import pytest

from testkit.server_process import RunningServer

@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One server for the whole session (Sail start-up is the slow part)."""
    base = tmp_path_factory.mktemp("srv")
    srv = RunningServer(base / "warehouse", base / "server.log")
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


# ---- engines: tests that must pass on every engine take the `engine` fixture --------------
def engines_under_test() -> list[str]:
    """DELTA_TEST_ENGINES=sail,spark runs those tests once per engine (default: sail)."""
    return [e.strip() for e in os.environ.get("DELTA_TEST_ENGINES", "sail").split(",") if e.strip()]


@pytest.fixture(scope="module", params=engines_under_test())
def engine(request):
    return request.param


@pytest.fixture(scope="module")
def engine_server(engine, tmp_path_factory):
    """A server of the `engine` under test, for one test module."""
    base = tmp_path_factory.mktemp(f"srv_{engine}")
    srv = RunningServer(base / "warehouse", base / "server.log", extra_args=["--engine", engine])
    yield srv
    srv.stop()
