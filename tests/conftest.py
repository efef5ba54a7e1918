"""Shared fixtures (servers, engines) and the test tiers, which follow from the fixtures a test uses.

Folders say what a test needs (a file lives where the most demanding of its tests belongs):
- unit/: this process alone: pure functions, readers, SQL strings, settings, in-process stand-ins
  (no engine, no destination server, no child process);
- engines/: a destination server or an engine (embedded Sail, a Spark JVM), door processes, a real
  S3 server, the local cluster;
- clients/: real clients end to end: PyAirbyte, Conduit itself, Airflow, the PyInstaller build
  (`make test-clients` runs their slow tests).
The tiers below do not depend on the folders. Helpers shared by tests and the benchmark live in
testkit/ (imported as `testkit.*`), none in this folder.

Tiers (the Makefile picks them with -m):
- fast (`make test`): everything that needs no engine, the package's doctests, and the tests that
  reach an engine only through the session's shared server on embedded Sail (`server`, `stub`,
  `engine_server` with engine "sail"), plus the tests marked `smoke` (each with a real local Spark JVM:
  the Spark smoke test, and engine auto moving a table past a small budget to Spark).
- full (`make test-all`, marker `full`, set here): the fast tier plus every test whose fixtures
  include the Spark engine (an `engine` parameter "spark"), a process of its own (a dedicated
  server, the crash harness, an Airbyte or Conduit door process) or a service (the Airflow venv,
  S3, a cluster): see FULL_TIER_FIXTURES. A new fixture that starts something costly belongs there
  (or is built on `dedicated_server`), and its tests follow without any list of tests to keep.
- A test may also be marked `full` by hand when it is a load run of minutes with nothing costly in
  its fixtures (the Conduit 200k-record backlog).
- slow (`make test-slow`, marked by hand): the long crash, fuzz and load runs and the real-client
  tests (`make test-clients` runs the latter).
"""
from __future__ import annotations

import hashlib
import os

import pytest

from testkit.engines import SharedSpark
from testkit.server_process import ROOT, TEST_ENGINES, RunningServer, engine_flags

FULL = "full"
# Fixtures whose users belong to the full tier, and why (a fixture that depends on one of them
# brings its users along: pytest's item.fixturenames is the whole closure).
FULL_TIER_FIXTURES = {
    "dedicated_server": "a destination server process of its own",
    "door_process": "Airbyte or Conduit door processes, each starting an engine of its own",
    "airflow_venv": "Airflow in its own virtualenv, built by `make airflow-venv`",
    "shared_spark": "the session's Apache Spark JVM",
    "s3_server": "a real S3 server (SeaweedFS)",
    "azure_server": "a real Azure Storage (Blob) server (Azurite)",
    "gcs_server": "a Google Cloud Storage API server (fake-gcs-server)",
    "iceberg_rest_server": "Apache Iceberg's REST catalog server (a JVM, `make iceberg-rest-jars`)",
    "cluster": "a local Spark cluster with a Hive metastore",
    "hive_metastore": "a Hive standalone metastore JVM",
    "auto_engines": "the local Apache Spark JVM engine auto starts on demand in the test process",
}
# A parameter of these names with the value "spark" means the test runs on the Spark engine.
ENGINE_PARAMETERS = ("engine", "engine_name")
# On the Spark engine some hostile-names replays run only in `make test-slow`: the live variant
# of the tester-input replays (the history variant covers each file's live tables too) and the
# Parquet-format replays (the batch format is decided before the engine; both engines read the
# same Arrow), and likewise input.json read gzip-compressed, unencrypted or both (the Spark engine
# replays input.json itself in test_tester_input). Everything runs on Sail.
SLOW_ON_SPARK = {"test_tester_input_with_hostile_names": "-live]", "test_parquet_batches_with_hostile_names": "]",
                 "test_input_gzip": "]", "test_input_plain_text": "]", "test_input_uncompressed_plain_text": "]"}


# Tests that only mean something on Apache Spark + Delta: their runs on the other engines are not collected.
SPARK_ONLY = {"test_widening_alter_table"}


def params_of(item) -> dict:
    """The parameters a collected test runs with (empty when it has none)."""
    return getattr(getattr(item, "callspec", None), "params", {})


def tier_reasons(item) -> list[str]:
    """Why a collected test belongs to the full tier (empty: the fast tier)."""
    reasons = [why for name, why in FULL_TIER_FIXTURES.items() if name in item.fixturenames]
    params = params_of(item)
    if any(params.get(p) == "spark" for p in ENGINE_PARAMETERS):
        reasons.append("the Apache Spark engine")
    if params.get("warehouse_kind") == "s3":
        reasons.append("a warehouse on a real S3 server")
    return reasons


def pytest_configure(config):
    config.addinivalue_line("markers", f"{FULL}: in the full tier only (`make test-all`); set from the fixtures a test uses")
    config.addinivalue_line("markers", "smoke: in the fast tier whatever it uses (the real local Spark runs of `make test`)")


# On Spark with the warehouse on S3, the full tier runs one public tester input (input.json, live: creates,
# upserts, updates, soft and hard deletes, truncates); every other Spark + S3 variant (the other tester
# inputs, history mode, the migration inputs, and the S3 variants of the other acceptance modules) runs in
# `make test-slow` (they took 10+ minutes of the full tier). What differs on S3 is engine-independent
# (staging, removal, the object-store migrations: all run on Sail + S3 in the full tier) or Spark's S3
# access itself (S3A settings, the log store, staged reads), which that input, tests/engines/test_object_storage.py,
# tests/engines/test_s3_processes.py and tests/engines/test_s3_doors.py exercise on Spark in the full tier.
FULL_ON_SPARK_S3 = ("tests/engines/test_tester_inputs.py::test_tester_input[spark-input.json-live-s3]",)


def on_spark_and_s3(item) -> bool:
    params = params_of(item)
    return params.get("warehouse_kind") == "s3" and any(params.get(p) == "spark" for p in ENGINE_PARAMETERS)


# Rough cost of a test, from what it uses (seconds-ish units): with several pytest workers the
# modules run costliest first, so that the last minutes are not one long module on one worker
# while the other idles (xdist's loadfile hands out whole modules in collection order).
COST_OF = {"cluster": 60, "auto_engines": 30, "dedicated_server": 10, "door_process": 10, "s3_server": 5, "azure_server": 5, "gcs_server": 5,
           "iceberg_rest_server": 5, "hive_metastore": 5, "shared_spark": 5, "airflow_venv": 2}


def estimated_cost(item) -> float:
    cost = 0.2 + sum(c for name, c in COST_OF.items() if name in item.fixturenames)
    if any(params_of(item).get(p) == "spark" for p in ENGINE_PARAMETERS):
        cost += 10
    if item.get_closest_marker(FULL) is not None and not tier_reasons(item):
        cost += 60  # a load run marked by hand
    return cost


def costliest_modules_first(items: list) -> list:
    """The same items, grouped by module (in their order inside it), costliest module first."""
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    ranked = sorted(modules.values(), key=lambda group: -sum(estimated_cost(i) for i in group))
    return [item for group in ranked for item in group]


def pytest_collection_modifyitems(config, items):
    elsewhere = [i for i in items if getattr(i, "originalname", "") in SPARK_ONLY and params_of(i).get("engine") != "spark"]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [i for i in items if i not in elsewhere]
    for item in items:
        if item.get_closest_marker("smoke") is None and tier_reasons(item):
            item.add_marker(getattr(pytest.mark, FULL))
        suffix = SLOW_ON_SPARK.get(getattr(item, "originalname", ""))
        if suffix and "[spark" in item.nodeid and item.nodeid.endswith(suffix):
            item.add_marker(pytest.mark.slow)
        if on_spark_and_s3(item) and not item.nodeid.startswith(FULL_ON_SPARK_S3):
            item.add_marker(pytest.mark.slow)
    workers = getattr(config.option, "numprocesses", None)
    if workers not in (None, 0, 1):
        items[:] = costliest_modules_first(items)



# ---- engines and servers ------------------------------------------------------------------------

@pytest.fixture(scope="session", params=TEST_ENGINES)
def engine(request):
    """The engine acceptance tests run against; every test that uses it runs once per engine."""
    return request.param


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """A local Spark cluster with S3 and a Hive metastore (tools/local_cluster), started in this
    process on first use and stopped at the end (test_cluster_infra's last test stops it itself)."""
    import json
    import time

    from tools.local_cluster import ClusterOptions, LocalCluster
    from testkit.processes import PeakMemory

    began = time.monotonic()
    c = LocalCluster(tmp_path_factory.mktemp("cluster") / "state", ClusterOptions())
    c.start()
    figures = {"start_s": round(time.monotonic() - began, 1), "parts_ready_s": {k: round(v, 1) for k, v in c.timings.items()},
               "storage": "s3" if c.s3 is not None else "local"}
    with PeakMemory(c) as mem:
        yield c
    figures["peak_rss_mb"] = round(mem.peak / 2**20)
    figures["peak_rss_parts_mb"] = {k: round(v / 2**20) for k, v in mem.peak_parts.items()}
    figures["session_s"] = round(time.monotonic() - began, 1)
    # The figures the note asks for, in the test log (pytest -s or the junit output show them).
    print("\ncluster figures: " + json.dumps(figures), flush=True)
    c.stop()


@pytest.fixture(scope="session")
def hive_metastore(tmp_path_factory):
    """A Hive standalone metastore 4.0.1 alone, without Spark (tools/local_cluster/metastore.py), for the
    session: what talks Thrift to a metastore itself (the Iceberg Hive catalog). `.uri` is thrift://..."""
    from tools.local_cluster.metastore import LocalMetastore

    base = tmp_path_factory.mktemp("hive-metastore")
    (base / "warehouse").mkdir()
    ms = LocalMetastore(base / "state", (base / "warehouse").as_uri()).start()
    yield ms
    ms.stop()


@pytest.fixture(scope="session")
def shared_spark():
    """One Apache Spark JVM for the session (testkit/engines.py), started on first use."""
    spark = SharedSpark()
    yield spark
    spark.stop()


@pytest.fixture(scope="session", params=["local"])
def warehouse_kind(request):
    """Where the session's servers keep their tables: a local directory, or (for the modules and
    tests that parametrize it with "s3", indirectly) a prefix of the session's real S3 server."""
    return request.param


@pytest.fixture(scope="session")
def server(tmp_path_factory, engine, warehouse_kind, request):
    """One server per engine (and warehouse kind) for the whole session (engine start-up is the slow
    part). On Spark it reaches the session's shared JVM. On S3 it is started as a user would: the
    standard AWS_* variables in its environment, `--warehouse s3://bucket/prefix`."""
    base = tmp_path_factory.mktemp(f"srv-{engine}-{warehouse_kind}")
    extra = ("--spark-remote", request.getfixturevalue("shared_spark").url) if engine == "spark" else ()
    warehouse, env = base / "warehouse", None
    if warehouse_kind == "s3":
        s3 = request.getfixturevalue("s3_server")
        warehouse, env = s3.url(f"srv-{engine}-{os.getpid()}/wh"), s3.env()
    srv = RunningServer(warehouse, base / "server.log", engine=engine, extra_args=extra, env=env)
    yield srv
    srv.stop()


@pytest.fixture
def stub(server):
    return server.stub


@pytest.fixture
def unique_schema(request):
    """A schema name unique to the test, so tests sharing the server do not collide."""
    name = request.node.nodeid
    safe = "".join(ch if ch.isalnum() else "_" for ch in request.node.name.lower())[:40]
    return f"t_{safe}_{hashlib.sha1(name.encode()).hexdigest()[:8]}_{os.getpid()}"


@pytest.fixture
def engine_server(server):
    """The session's server of the engine under test (see `engine`)."""
    return server


@pytest.fixture(scope="session")
def dedicated_server(shared_spark):
    """Starts a server of the test's own: RunningServer's arguments, plus `own_jvm`.

    A Spark server reaches the session's shared JVM (`--spark-remote`) unless `own_jvm=True`: only
    tests about the destination's own local engine (its start, death, scratch folder, restart)
    need a JVM of their own. Servers a test leaves running are stopped at the end of the session."""
    started: list[RunningServer] = []

    def start(warehouse, log_path, extra_args=(), *, engine=None, own_jvm=False, launcher=None, **kwargs) -> RunningServer:
        extra_args = tuple(extra_args)
        flags = engine_flags(("--engine", engine, *extra_args) if engine else extra_args)
        if flags.get("--engine") == "spark" and "--spark-remote" not in flags and not own_jvm and launcher is None:
            extra_args += ("--spark-remote", shared_spark.url)
        srv = RunningServer(warehouse, log_path, extra_args, engine=engine, launcher=launcher, **kwargs)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture(scope="session")
def parquet_server(tmp_path_factory, dedicated_server):
    """A Sail server whose Capabilities answer PARQUET (so its batch files are Parquet), shared by
    the tests of Parquet batches (each writes its own schemas)."""
    base = tmp_path_factory.mktemp("parquet")
    return dedicated_server(base / "warehouse", base / "server.log", extra_args=("--batch-file-format", "parquet"))


@pytest.fixture(scope="session")
def door_process(shared_spark):
    """For tests that run the Airbyte or Conduit door as real processes (each starts its own
    engine): what a door's configuration needs to reach the session's shared Spark JVM."""

    def spark_remote(engine: str) -> dict:
        return {"spark_remote": shared_spark.url} if engine == "spark" else {}

    return spark_remote


@pytest.fixture
def plugin(tmp_path, door_process):
    """Starts the Conduit connector as a real plugin process (testkit/conduit_host.py), as often as a
    test asks (keyword arguments: PluginProcess's); every one is closed at the test's end."""
    from testkit.conduit_host import PluginProcess
    started = []

    def start(**kw):
        p = PluginProcess(tmp_path / f"plugin{len(started)}.log", **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        p.close()


@pytest.fixture(scope="session")
def s3_server():
    """One real S3 server (SeaweedFS, tools/s3_server.py) for the session; tests use their own
    prefixes of its bucket. Its credentials are the server's own, passed explicitly (settings,
    a process's environment), never put in this process's environment."""
    from testkit.delta_read import register_storage
    from tools.s3_server import S3Server

    with S3Server() as s3:
        register_storage(s3.url(), s3.storage_options())   # helpers read tables under it with its keys
        yield s3


@pytest.fixture(scope="session")
def azure_server():
    """One Azurite (tools/azure_server.py, installed by `make azurite`) for the
    session, with a random account; tests use their own prefixes of its container. Missing Azurite
    fails the tests (no skip)."""
    from testkit.delta_read import register_storage
    from tools.azure_server import AzureServer

    with AzureServer() as az:
        register_storage(az.url(), az.storage_options())
        yield az


@pytest.fixture(scope="session")
def gcs_server():
    """One fake-gcs-server (tools/gcs_server.py, from the dev extra's wheel) for the
    session; tests use their own prefixes of its bucket. Missing, it fails the tests (no skip)."""
    from testkit.delta_read import register_storage
    from tools.gcs_server import GcsServer

    with GcsServer() as gcs:
        register_storage(gcs.url(), gcs.storage_options())
        yield gcs


@pytest.fixture(scope="session")
def airflow_venv():
    """The Python of Airflow's test virtualenv, built by `make airflow-venv` (never by a test run)."""
    venv = ROOT / ".airflow-venv"
    if not (venv / ".stamp").is_file():  # written by scripts/airflow_test_venv.sh once it succeeded
        pytest.fail("the Airflow test virtualenv is missing: run `make airflow-venv` (make test-all does)")
    return venv / "bin" / "python"


@pytest.fixture
def core(engines):
    """The core driven in-process on the requesting module's `engines` pool (each module that uses it
    defines `engines`: with its object-store server, the shared Spark JVM, or neither)."""
    from delta_destination.core.api import DeltaCore
    from delta_destination.engines.router import EngineRouter

    return DeltaCore(EngineRouter(engines), door="test")
