"""Generated Conduit protocol stubs (make install; never edited by hand, never committed).

The .proto files import each other as `opencdc/v1/opencdc.proto`, so protoc writes top-level
packages (`connector`, `opencdc`, `config`, `schema`, `connutils`, `plugin`) that import each
other absolutely. This folder goes on sys.path (last, so it never shadows an installed package)
and the door imports the stubs only through this module.
"""
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.append(_HERE)

from connector.v2 import destination_pb2, destination_pb2_grpc, specifier_pb2, specifier_pb2_grpc  # noqa: E402
from config.v1 import parameter_pb2  # noqa: E402
from connutils.v1 import schema_pb2 as connutils_schema_pb2, schema_pb2_grpc as connutils_schema_pb2_grpc  # noqa: E402
from opencdc.v1 import opencdc_pb2  # noqa: E402
from plugin import grpc_controller_pb2, grpc_controller_pb2_grpc  # noqa: E402
from schema.v1 import schema_pb2  # noqa: E402

__all__ = [
    "destination_pb2", "destination_pb2_grpc", "specifier_pb2", "specifier_pb2_grpc", "parameter_pb2",
    "connutils_schema_pb2", "connutils_schema_pb2_grpc", "opencdc_pb2", "grpc_controller_pb2",
    "grpc_controller_pb2_grpc", "schema_pb2",
]
