"""Generated Fivetran SDK v2 stubs (built from proto/ by `make proto` or build.sh; never edited by hand).

protoc writes `import common_pb2` / `import destination_sdk_pb2` as top-level imports; the build
rewrites them package-relative right after protoc (buildkit/proto_imports.py), so the stubs load
as modules of this package.
"""
from . import common_pb2, destination_sdk_pb2, destination_sdk_pb2_grpc

__all__ = ["common_pb2", "destination_sdk_pb2", "destination_sdk_pb2_grpc"]
