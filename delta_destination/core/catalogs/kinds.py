"""Which catalog a request's settings name: the table of catalogs by the scheme of `catalog_uri`.

Adding a catalog (an Iceberg REST catalog, say) is a module beside hive.py implementing
catalog.Catalog and one row here; the settings check of `catalog_uri` (settings.py) then takes its
URIs too.
"""
from __future__ import annotations

from typing import Callable, Optional
from urllib.parse import urlsplit

from ...engines.router import EngineRouter
from ...errors import InvalidRequest
from ...settings import Settings
from .catalog import Catalog
from .hive import HiveMetastore

# URI scheme of catalog_uri -> the catalog, made for one request's settings and the router.
CATALOGS: dict[str, Callable[[Settings, EngineRouter], Catalog]] = {
    "thrift": HiveMetastore,
}


def catalog_for(settings: Settings, router: EngineRouter) -> Optional[Catalog]:
    """The catalog of these settings (None: `catalog_uri` empty, tables are paths only).
    >>> catalog_for(Settings.create("/wh"), None) is None
    True
    >>> catalog_for(Settings.create("/wh", catalog_uri="thrift://h:9083"), None).name
    'the Hive Metastore'
    """
    if not settings.catalog_uri:
        return None
    make = CATALOGS.get(urlsplit(settings.catalog_uri).scheme.lower())
    if make is None:
        raise InvalidRequest(f"catalog_uri {settings.catalog_uri!r} names no catalog the destination knows "
                             f"(URIs: {', '.join(f'{s}://' for s in CATALOGS)})")
    return make(settings, router)
