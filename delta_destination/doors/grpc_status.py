"""The one table from typed errors to gRPC status codes, shared by the two gRPC doors
(Fivetran's server, the Conduit connector). Each door still decides what its protocol
answers besides a status (a Fivetran Task for what the customer must fix, a Conduit nack)."""
from __future__ import annotations

import grpc

from .. import errors

# Most specific first: the first matching class decides the status.
STATUS = (
    (errors.InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.TableNotFound, grpc.StatusCode.NOT_FOUND),
    (errors.TableAlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (errors.UnsupportedOperation, grpc.StatusCode.UNIMPLEMENTED),
    (errors.EngineUnavailable, grpc.StatusCode.UNAVAILABLE),
    (errors.MemoryBudgetExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.CustomerActionRequired, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.RequesterGone, grpc.StatusCode.CANCELLED),
    (errors.EngineError, grpc.StatusCode.INTERNAL),
)


def grpc_status(exc: errors.DestinationError) -> grpc.StatusCode:
    """
    >>> grpc_status(errors.UnsafeName("x")).name, grpc_status(errors.EngineUnavailable("x")).name
    ('INVALID_ARGUMENT', 'UNAVAILABLE')
    """
    for cls, code in STATUS:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL
