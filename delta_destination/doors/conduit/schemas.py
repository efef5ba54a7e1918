"""Avro schemas from Conduit's schema service (connutils.v1.SchemaService), which Conduit serves
to its plugins at CONDUIT_CONNECTOR_UTILITIES_GRPC_TARGET; every call carries the connector's
token. Schemas are immutable per (subject, version), so each is fetched once."""
from __future__ import annotations

import json
import threading
from typing import Any, Optional

import grpc

from ... import logs
from ._proto import connutils_schema_pb2 as pb, connutils_schema_pb2_grpc as pb_grpc, schema_pb2
from .errors import SchemaUnavailable

log = logs.get(__name__)
TOKEN_HEADER = "conduit-connector-token"
TARGET_ENV = "CONDUIT_CONNECTOR_UTILITIES_GRPC_TARGET"
TOKEN_ENV = "CONDUIT_CONNECTOR_TOKEN"


def dial_target(target: str) -> str:
    """Conduit listens on `[::]:PORT` or `:PORT`; dial loopback instead of the wildcard."""
    host, sep, port = target.rpartition(":")
    if sep and host in ("", "[::]", "::", "0.0.0.0"):
        return f"127.0.0.1:{port}"
    return target


class SchemaService:
    def __init__(self, target: str, token: str, timeout: float = 10.0):
        self.target = dial_target(target)
        self.token = token
        self.timeout = timeout
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, int], Any] = {}
        self._channel: Optional[grpc.Channel] = None

    def _stub(self) -> pb_grpc.SchemaServiceStub:
        if self._channel is None:
            self._channel = grpc.insecure_channel(self.target)
        return pb_grpc.SchemaServiceStub(self._channel)

    def avro(self, subject: str, version: int) -> Any:
        import fastavro

        key = (subject, version)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            try:
                resp = self._stub().GetSchema(pb.GetSchemaRequest(subject=subject, version=version),
                                              metadata=((TOKEN_HEADER, self.token),), timeout=self.timeout)
            except grpc.RpcError as exc:
                raise SchemaUnavailable(
                    f"schema {subject!r} version {version} could not be fetched from Conduit ({exc.code().name})") from None
            if resp.schema.type != schema_pb2.Schema.TYPE_AVRO:
                raise SchemaUnavailable(f"schema {subject!r} version {version} is not an Avro schema")
            try:
                parsed = fastavro.parse_schema(json.loads(resp.schema.bytes))
            except Exception as exc:  # noqa: BLE001
                raise SchemaUnavailable(f"schema {subject!r} version {version} is not a valid Avro schema "
                                        f"({type(exc).__name__})") from None
            self._cache[key] = parsed
            log.info(f"loaded Avro schema {subject!r} version {version}")
            return parsed

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
