"""Fivetran requests with `iceberg=metadata` in their configuration, as the Iceberg tests send them
(tests/engines/test_iceberg_mirror.py, test_iceberg_stores.py, tests/clients/test_iceberg_java_reader.py):
real encrypted batch files through testkit.fivetran_requests."""
from __future__ import annotations

from typing import Optional

from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from testkit.fivetran_requests import batch_file, write_request

ICEBERG_ON = {"iceberg": "metadata"}


def on(request, config: Optional[dict] = None):
    """The request with Iceberg metadata turned on (its configuration updated in place), and `config`."""
    request.configuration.update({**ICEBERG_ON, **(config or {})})
    return request


def write(stub, schema, tproto, tmp_path, replace=(), update=(), delete=(), update_columns=None,
          timeout: Optional[float] = None, config: Optional[dict] = None) -> None:
    """One WriteBatch of upserts, partial updates (`update_columns`) and hard deletes (by id), which must succeed."""
    req = write_request(schema, tproto,
                        replace=[batch_file(tmp_path, tproto, list(replace))] if replace else [],
                        update=[batch_file(tmp_path, tproto, list(update), kind="update", columns=update_columns)]
                        if update else [],
                        delete=[batch_file(tmp_path, tproto, list(delete), kind="delete",
                                           columns=["id", "_fivetran_synced"])] if delete else [])
    assert stub.WriteBatch(on(req, config), timeout=timeout).success


def migrate(stub, schema, name, config: Optional[dict] = None, **operation):
    """One Migrate of `operation` (a MigrationDetails field), which must succeed."""
    r = stub.Migrate(on(pb.MigrateRequest(details=pb.MigrationDetails(schema=schema, table=name, **operation)),
                        config))
    assert r.WhichOneof("response") == "success", r
    return r
