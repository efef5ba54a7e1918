#!/usr/bin/env bash
# Fivetran's build pipeline runs this before PyInstaller (`pyinstaller --onefile main.py`).
# 1. the Python gRPC stubs from the SDK's protos, into delta_destination/doors/fivetran/_proto
#    (installing grpcio-tools first when the current Python lacks it), importing each other
#    package-relatively (buildkit/proto_imports.py). The protos are
#    committed copies of the SDK's (proto/): the build has no internet access to fetch them.
# 2. the package data files PyInstaller cannot find by following imports, embedded as a
#    Python module (delta_destination/frozen); this needs requirements.txt installed, so it
#    is installed first when pyspark is missing.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
OUT=delta_destination/doors/fivetran/_proto
GRPCIO_TOOLS_VERSION=1.85.1  # the grpcio release pinned in requirements.txt

if ! "$PYTHON" -c "import grpc_tools.protoc" >/dev/null 2>&1; then
    "$PYTHON" -m pip install --quiet "grpcio-tools==${GRPCIO_TOOLS_VERSION}"
fi
"$PYTHON" -m grpc_tools.protoc -Iproto --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
    proto/common.proto proto/destination_sdk.proto
"$PYTHON" -m buildkit.proto_imports "$OUT"   # their imports of each other, package-relative
echo "generated gRPC stubs in $OUT"

if ! "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('pyspark') is None)"; then
    "$PYTHON" -m pip install --quiet -r requirements.txt
fi
"$PYTHON" -m delta_destination.frozen.embed
