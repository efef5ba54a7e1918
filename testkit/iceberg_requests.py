"""Fivetran requests with `iceberg=metadata` in their configuration, as the Iceberg tests send them
(tests/engines/test_iceberg_mirror.py, test_iceberg_stores.py, the catalog tests,
tests/clients/test_iceberg_java_reader.py): real encrypted batch files through testkit.fivetran_requests."""
from __future__ import annotations

import datetime as dt
from typing import Optional

from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from testkit.delta_read import delta_version, read_delta_table
from testkit.fivetran_requests import batch_file, col, table, write_request
from testkit.iceberg_read import newest_metadata

SYNCED = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)

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


def small(name: str):
    """The three-column table most Iceberg tests write (id key, name, _fivetran_synced)."""
    return table(name, col("id", "LONG", pk=True), col("name", "STRING"), col("_fivetran_synced", "UTC_DATETIME"))


def rows(ids, name: str) -> list[dict]:
    """Rows of `small` tables: these ids, each with this name."""
    return [{"id": i, "name": name, "_fivetran_synced": SYNCED} for i in ids]


def write_past_an_unusable_catalog(stub, server, schema: str, tproto, tmp_path, unusable: dict, hidden: str) -> str:
    """Five rows written with an Iceberg catalog that cannot be used (`unusable`: the configuration
    naming it), which must not fail the request: the Delta commit and the metadata folder stand, the
    log says so without the rows' values or `hidden` (what the URI holds). Returns the table's path."""
    path = f"{server.warehouse}/{schema}/{tproto.name}"
    write(stub, schema, tproto, tmp_path, replace=rows(range(1, 6), "secret-value"), config=unusable)
    assert read_delta_table(path).num_rows == 5
    assert newest_metadata(path).endswith(f"v{delta_version(path) + 1}.metadata.json")   # the mirror ran
    log = server.log_text()
    assert f"{schema}.{tproto.name}: Iceberg catalog entry not moved to the newest metadata (" in log, log[-2000:]
    assert "secret-value" not in log and hidden not in log
    return path
