"""Generated Fivetran SDK v2 stubs (built from proto/ by `make proto`).

protoc emits `import common_pb2` / `import destination_sdk_pb2` as top-level
imports; registering the package modules under those names lets the generated
code load unchanged.
"""
import sys

from . import common_pb2

sys.modules.setdefault("common_pb2", common_pb2)

from . import destination_sdk_pb2  # noqa: E402

sys.modules.setdefault("destination_sdk_pb2", destination_sdk_pb2)

from . import destination_sdk_pb2_grpc  # noqa: E402

__all__ = ["common_pb2", "destination_sdk_pb2", "destination_sdk_pb2_grpc"]
