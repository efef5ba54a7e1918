"""Canonical dataset URIs and OpenLineage dataset names for the tables we write.

Downstream schedulers (Airflow assets, AIP-60) and lineage backends (OpenLineage) match
datasets by exact strings, so a table must have ONE name however its warehouse was
spelled. The rules, in Airflow's order (`airflow.sdk.definitions.asset._sanitize_uri`
plus the provider handler of each scheme), and where we go further:

- the scheme is lowercased; Hadoop/fsspec aliases that reach the same storage are folded
  into the scheme Airflow's providers register (s3a/s3n -> s3, gcs -> gs, abfs -> abfss,
  wasb -> wasbs): Airflow itself never aliases, so without this an asset declared as
  `s3://...` would never match a table the engine writes through `s3a://...`;
- credentials never appear: any user info is dropped (Airflow drops it only with a
  password), except the container of Azure URLs (`container@account`), which is not a
  credential but part of the address; its password part, if any, is dropped;
- the query (SAS tokens live there) and the fragment are dropped;
- local directories become `file://` + absolute path with an empty host (the form of
  Airflow's `create_asset(path=)`, OpenLineage and Spark); `file://localhost/...` roots
  are folded into it;
- the URI names the table's directory, where readers find the data: schema and table
  names appear as the warehouse spells them on disk (docs/names.md: letters, digits,
  `_-.` literal, every other byte `=XX`, so `order items` is `order=20items`); each path
  component is percent-encoded with `=` left literal (`quote(part, safe="=")`), so a
  component never splits or leaks a `#` or `?`; no trailing slash.

The result is a fixed point of Airflow's normaliser (`Asset(uri=u).uri == u`), checked by
tests/unit/test_lineage_uris.py against Airflow's own code.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from ..storage import is_url
from ..warehouse import directory_name, normalise_root

SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "abfs": "abfss", "wasb": "wasbs"}
# Schemes whose user-info part names a container, not a user (abfss://container@account/...).
CONTAINER_SCHEMES = ("abfss", "wasbs")


@dataclass(frozen=True)
class OpenLineageName:
    """An OpenLineage dataset identity (naming.md): namespace `scheme://authority`, name = path."""

    namespace: str
    name: str


class UnusableLocation(ValueError):
    """A warehouse root from which no dataset URI can be built (e.g. a URL without a host)."""


def _quote_parts(parts: list[str]) -> str:
    return "/" + "/".join(quote(p, safe="=") for p in parts if p != "")


def _authority(scheme: str, netloc: str) -> str:
    userinfo, at, hostport = netloc.rpartition("@")
    if not at:
        return netloc
    if scheme in CONTAINER_SCHEMES:
        container = userinfo.split(":", 1)[0]
        return f"{container}@{hostport}" if container else hostport
    return hostport


def root_uri(root: str) -> tuple[str, list[str]]:
    """(`scheme://authority`, decoded path components) of a warehouse root."""
    if not is_url(root):
        return "file://", [p for p in normalise_root(root).split(os.sep) if p]
    parts = urlsplit(root)
    scheme = SCHEME_ALIASES.get(parts.scheme.lower(), parts.scheme.lower())
    netloc = _authority(scheme, parts.netloc)
    if scheme == "file":
        if netloc.lower() == "localhost":
            netloc = ""
    elif not netloc:
        raise UnusableLocation(f"the warehouse URL has no bucket or host (scheme {scheme!r})")
    # The root is a path as the engine sees it (Hadoop paths are not percent-encoded);
    # a root already written encoded is decoded first so encoding stays idempotent.
    return f"{scheme}://{netloc}", [unquote(p) for p in parts.path.split("/") if p]


def table_uri(root: str, schema: str, table: str) -> str:
    """The canonical dataset URI of the table `schema`.`table` of the warehouse at `root`.

    >>> table_uri("s3a://lake/wh/", "sales", "order items")
    's3://lake/wh/sales/order=20items'
    >>> table_uri("/tmp/wh", "s", "t")
    'file:///tmp/wh/s/t'
    """
    base, parts = root_uri(root)
    return base + _quote_parts(parts + [directory_name("schema", schema), directory_name("table", table)])


def root_of(location: str, schema: str, table: str) -> str:
    """The warehouse root of a table location built by `Warehouse.table_location` (its last
    two components are the spelled schema and table names, or the raw names for tables
    created before names were spelled; names hold no separators, so stripping is exact)."""
    sep = "/" if is_url(location) else os.sep
    for names in ((directory_name("schema", schema), directory_name("table", table)), (schema, table)):
        suffix = sep + sep.join(names)
        if location.endswith(suffix) and len(location) > len(suffix):
            return location[: -len(suffix)]
    raise UnusableLocation("the location does not end with the table's schema and name")


def location_uri(location: str, schema: str, table: str) -> str:
    """The canonical URI of a table from its location (what the core's events carry)."""
    return table_uri(root_of(location, schema, table), schema, table)


def openlineage_name(uri: str) -> OpenLineageName:
    """OpenLineage's (namespace, name) for one of our canonical URIs (naming.md): local files
    are (`file`, `/abs/path`), object stores (`scheme://authority`, key without leading
    slash). This is what Airflow's providers' `convert_asset_to_openlineage` answer for the
    same URI, so lineage emitted here joins the lineage Airflow emits for the asset. For
    plain names it is also what the Spark integration reports; for names that need
    percent-encoding the name stays encoded like Airflow's (Spark would decode it).

    >>> openlineage_name("s3://lake/wh/sales/order=20items")
    OpenLineageName(namespace='s3://lake', name='wh/sales/order=20items')
    """
    parts = urlsplit(uri)
    path = parts.path
    if parts.scheme == "file":
        return OpenLineageName(f"file://{parts.netloc}" if parts.netloc else "file", path)
    return OpenLineageName(f"{parts.scheme}://{parts.netloc}", path.strip("/"))
