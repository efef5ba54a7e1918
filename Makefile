# Every target creates .venv itself, so `make run` and `make test` work from a fresh clone.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROTO_OUT := delta_destination/fivetran/_proto
PORT ?= 50052
WAREHOUSE ?= ./warehouse

.PHONY: install proto run test test-slow bench clean airbyte-clients

install: $(STAMP) $(PROTO_OUT)/destination_sdk_pb2.py

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# Generated gRPC stubs: produced from proto/ by grpcio-tools, never edited by hand.
$(PROTO_OUT)/destination_sdk_pb2.py: proto/common.proto proto/destination_sdk.proto $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=$(PROTO_OUT) --pyi_out=$(PROTO_OUT) \
		--grpc_python_out=$(PROTO_OUT) proto/common.proto proto/destination_sdk.proto

proto: $(PROTO_OUT)/destination_sdk_pb2.py

run: install
	$(BIN)/fivetran-delta-destination --port $(PORT) --warehouse $(WAREHOUSE)

test: install
	$(BIN)/python -m pytest -q

test-slow: install airbyte-clients
	$(BIN)/python -m pytest -q -m slow

# PyAirbyte and airbyte-source-faker for the Airbyte door's real-client tests, each in its own
# virtualenv under .venvs/ (they need incompatible airbyte-cdk versions); reused when present.
airbyte-clients:
	PYTHON=$(PYTHON) scripts/airbyte_client_venvs.sh

bench: install
	$(BIN)/python scripts/bench.py

clean:
	rm -rf $(VENV) $(PROTO_OUT)/*_pb2*.py $(PROTO_OUT)/*_pb2*.pyi
