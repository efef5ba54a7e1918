"""Generated Conduit protocol stubs (make install; never edited by hand, never committed).

The .proto files import each other as `opencdc/v1/opencdc.proto`, so protoc writes packages
(`connector`, `opencdc`, `config`, `schema`, `connutils`, `plugin`) that import each other
absolutely; the build rewrites those imports package-relative right after protoc
(buildkit/proto_imports.py), so the stubs load as subpackages of this one. The door imports the
stubs only through this module.
"""
from __future__ import annotations

from .config.v1 import parameter_pb2
from .connector.v2 import destination_pb2, destination_pb2_grpc, specifier_pb2, specifier_pb2_grpc
from .connutils.v1 import schema_pb2 as connutils_schema_pb2, schema_pb2_grpc as connutils_schema_pb2_grpc
from .opencdc.v1 import opencdc_pb2
from .plugin import grpc_controller_pb2, grpc_controller_pb2_grpc
from .schema.v1 import schema_pb2

__all__ = [
    "destination_pb2", "destination_pb2_grpc", "specifier_pb2", "specifier_pb2_grpc", "parameter_pb2",
    "connutils_schema_pb2", "connutils_schema_pb2_grpc", "opencdc_pb2", "grpc_controller_pb2",
    "grpc_controller_pb2_grpc", "schema_pb2",
]
