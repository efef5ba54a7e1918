"""The mirror as after-commit work: what the table registry runs, under the table's lock, once an
operation committed to a table (core/registry.py `mirror_committed`).

Decided: a failed mirror never fails the request nor undoes its Delta commit. The Delta commit is
durable and is the table's truth; the Iceberg side lags (it still shows a state Delta had), the
failure is logged without values and counted, and the next commit's mirror catches up.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ... import logs, metrics
from ...settings import ICEBERG_OFF, Settings
from ...warehouse import Warehouse

if TYPE_CHECKING:
    from .mirror import MirrorResult
log = logs.get(__name__)

_MIRROR = None   # the IcebergMirror, made at the first mirror: pyiceberg is imported only where Iceberg is on


def mirror_after_commit(settings: Settings, warehouse: Warehouse, display: str, location: str) -> Optional["MirrorResult"]:
    """Mirror the table's unmirrored Delta versions when its settings turn Iceberg on (None: off,
    or the mirror failed and was logged)."""
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
    return result
