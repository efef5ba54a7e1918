"""The Specification Conduit reads at start-up (plugins are keyed by name and version)."""
from __future__ import annotations

from ._proto import parameter_pb2, specifier_pb2
from .params import BOOL, DURATION, FLOAT, INT, PARAMS, STRING

NAME = "delta-lake"
VERSION = "v0.1.0"
SUMMARY = "Applies OpenCDC records to Delta Lake tables (upserts and deletes by key, one Delta commit per batch)."
DESCRIPTION = (
    "create, snapshot and update upsert payload.after by key; delete removes by key. Payloads may be structured, "
    "raw JSON or Avro (schema from Conduit's schema service). Tables are created on first sight under "
    "<warehouse>/<schema>/<table> and gain columns as new fields appear. Engine: embedded Sail, or a Spark Connect "
    "server (Sail, or Apache Spark with Delta Lake).")
AUTHOR = "fivetran-delta-destination"

_TYPES = {STRING: parameter_pb2.Parameter.TYPE_STRING, INT: parameter_pb2.Parameter.TYPE_INT,
          FLOAT: parameter_pb2.Parameter.TYPE_FLOAT,
          BOOL: parameter_pb2.Parameter.TYPE_BOOL, DURATION: parameter_pb2.Parameter.TYPE_DURATION}


def specification() -> specifier_pb2.Specification:
    spec = specifier_pb2.Specification(name=NAME, summary=SUMMARY, description=DESCRIPTION, version=VERSION,
                                       author=AUTHOR)
    V = parameter_pb2.Validation
    for p in PARAMS:
        param = spec.destination_params[p.name]
        param.default = p.default
        param.description = p.description
        param.type = _TYPES[p.type]
        if p.required:
            param.validations.add(type=V.TYPE_REQUIRED)
        if p.choices:
            param.validations.add(type=V.TYPE_INCLUSION, value=",".join(c for c in p.choices if c))
        if p.min_value is not None:
            param.validations.add(type=V.TYPE_GREATER_THAN, value=str(p.min_value - 1))
    return spec
