#!/usr/bin/env bash
# The Airbyte door's real-client tests need PyAirbyte and airbyte-source-faker, each in its own
# virtualenv: source-faker pins airbyte-cdk<7 while PyAirbyte needs airbyte-cdk>=7.28, and
# neither can share our .venv (see docs/airbyte.md). Reused when present (a stamp per venv).
set -euo pipefail
PYTHON="${PYTHON:-python3.11}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${AIRBYTE_VENVS:-$ROOT/.venvs}"
make_venv() {  # name, pip requirements...
  local venv="$DIR/$1"; shift
  local stamp="$venv/.installed-$(echo "$*" | cksum | cut -d' ' -f1)"  # new pins rebuild the venv
  if [ -f "$stamp" ]; then return; fi
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q "$@"
  touch "$stamp"
}
make_venv source-faker 'airbyte-source-faker==7.2.1'
# source-smoke-test (PyAirbyte's edge-case source for `pyab destination-smoke-test`) is built on PyAirbyte.
make_venv pyairbyte 'airbyte==0.71.3' 'airbyte-source-smoke-test==0.1.2'
echo "$DIR/source-faker/bin/source-faker"
echo "$DIR/pyairbyte/bin/python"
