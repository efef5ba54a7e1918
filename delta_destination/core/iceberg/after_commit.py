"""The mirror as after-commit work: what the table registry runs, under the table's lock, once an
operation committed to a table (core/registry.py `mirror_committed`).

Decided: a failed mirror never fails the request nor undoes its Delta commit. The Delta commit is
durable and is the table's truth; the Iceberg side lags (it still shows a state Delta had), the
failure is logged without values and counted, and the next commit's mirror catches up. The same
holds for the table's entry in an Iceberg catalog (setting `iceberg_catalog_uri`, catalogs.py): it
is moved to the newest metadata file after the mirror, also when the mirror had nothing to do (a
catalog configured later, an entry a failed move left behind), and a failed move is logged, counted
and made by the next commit.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

from ... import logs, metrics
from ...settings import ICEBERG_OFF, Settings
from ...warehouse import Warehouse

if TYPE_CHECKING:
    from .mirror import MirrorResult
log = logs.get(__name__)

_MIRROR = None   # the IcebergMirror, made at the first mirror: pyiceberg is imported only where Iceberg is on


def mirror_after_commit(settings: Settings, warehouse: Warehouse, display: str, location: str,
                        entry: Optional[Tuple[str, str]] = None) -> Optional["MirrorResult"]:
    """Mirror the table's unmirrored Delta versions when its settings turn Iceberg on (None: off,
    or the mirror failed and was logged), then its catalog entry `entry` (schema, table; None: the
    table has none, as a door's working table)."""
    global _MIRROR
    if settings.iceberg == ICEBERG_OFF:
        return None
    try:
        if _MIRROR is None:
            from .mirror import IcebergMirror
            _MIRROR = IcebergMirror()
        result = _MIRROR.mirror(warehouse, display, location)
    except Exception as e:  # noqa: BLE001 - the Delta commit stands whatever the mirror raised
        log.warning(f"{display}: Iceberg metadata not updated ({type(e).__name__}); the Delta commit stands and the "
                    "next commit to the table catches the Iceberg metadata up")
        log.debug(f"{display}: Iceberg mirror failure: {e}")
        metrics.iceberg_mirrored("failed")
        return None
    metrics.iceberg_mirrored(result.outcome)
    if entry is not None and settings.iceberg_catalog_uri and result.metadata_location:
        from .entries import publish_entry
        publish_entry(settings, warehouse, display, location, entry, result.metadata_location)
    return result
