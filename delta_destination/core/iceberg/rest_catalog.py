"""An Iceberg REST catalog (the Iceberg REST catalog API, through pyiceberg's `RestCatalog`) as the
place of the entries of catalogs.py: `iceberg_catalog_uri` the catalog's base URL, http:// or https://
(`<url>/v1/config` is its configuration endpoint), optionally with `?warehouse=<name>`, sent as the
REST `warehouse` parameter by which servers that hold several catalogs (Polaris, Lakekeeper, ...) pick
one. Nothing else: no credentials (a server that asks for a token or OAuth is not supported yet), and
`iceberg_catalog_name` names only the client, not the server's catalog.

An entry is a table registered with its metadata file (`register`): the server reads that file and
keeps its location as the table's, writing nothing itself (the 1.10 JdbcCatalog of Iceberg's REST
fixture, checked by tests/engines/test_iceberg_rest_catalog.py). pyiceberg never reads the metadata
here: the server answers with it (so the store settings of a request need not reach pyiceberg's FileIO,
core/iceberg/file_io.py, as for the SQL kind).

Moving an entry: the REST API has no compare-and-set of a table's metadata location (a commit makes the
server write a metadata file of its own, which is not the mirror's). The move re-reads the entry and,
when it still names `expected`, registers the new file with `overwrite` (REST spec, Iceberg 1.10's API
file): one atomic replacement where the server implements it. Servers that do not (Iceberg's Java
catalogs before 1.11 ignore the field and answer 409; 1.11's JdbcCatalog refuses it) get the entry
dropped (without purge: no file is touched) and registered again. Decided, what this leaves:
- between the re-read and the replacement another writer's move can be overwritten (the entry then
  lags one commit behind that writer: its next commit moves it forward again, never backward past a
  file that exists, pointer_step);
- with drop and register, readers see no table for the instant between the two requests, and a
  register that fails after the drop puts the old entry back (best effort; else the next commit
  registers the table anew).
Which of the two a server takes is learned at the first move and kept for the process.

Reading an entry: loadTable answers with the entry's metadata, which the server reads from the file the
entry names; once that file is gone (the table renamed or dropped: its entry is dropped after its folder
moved) the server answers NotFoundException naming the file, and that file is taken as the entry's
location (missing_metadata_file), so the rules of catalogs.py hold: such an entry is ours to drop when it
names our folder, and taken over otherwise. Any other failure to load an entry is raised.

Requests are bounded by REQUEST_TIMEOUT (requests has no default): an unanswering server never holds
a write request for long (after_commit.py logs the failure and the next commit moves the entry). The
client is made at the first entry request, not with the settings, so that checking a name (before a
table is created) needs no server.
"""
from __future__ import annotations

import re
import threading
from typing import Optional
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (NamespaceAlreadyExistsError, NoSuchTableError, RESTError,
                                  TableAlreadyExistsError)
from requests import Session
from requests.adapters import HTTPAdapter

from ...errors import InvalidRequest
from .catalogs import IcebergCatalog

REQUEST_TIMEOUT = (10.0, 30.0)   # seconds to connect, and to wait for an answer
NAMESPACE_SEPARATOR = "\x1f"     # the REST API's separator of nested namespace levels in a URL path
URI_PARAMETERS = ("warehouse",)


def rest_properties(uri: str) -> dict[str, str]:
    """pyiceberg RestCatalog properties of an iceberg_catalog_uri (InvalidRequest for what it cannot say).
    >>> rest_properties("http://127.0.0.1:8181")
    {'uri': 'http://127.0.0.1:8181'}
    >>> rest_properties("https://cat.example/api/catalog/?warehouse=lake")
    {'uri': 'https://cat.example/api/catalog', 'warehouse': 'lake'}
    >>> rest_properties("http://h/c?token=x")
    Traceback (most recent call last):
    ...
    delta_destination.errors.InvalidRequest: iceberg_catalog_uri of a REST catalog takes only these parameters: warehouse
    """
    u = urlsplit(uri)
    if u.username is not None or u.password is not None:
        raise InvalidRequest("iceberg_catalog_uri of a REST catalog cannot carry credentials: a REST catalog that "
                             "asks for them is not supported")
    if not u.hostname:
        raise InvalidRequest("iceberg_catalog_uri of a REST catalog must name its host: http://host:8181")
    properties = {"uri": urlunsplit((u.scheme, u.netloc, u.path.rstrip("/"), "", ""))}
    for key, value in parse_qsl(u.query, keep_blank_values=True):
        if key not in URI_PARAMETERS:
            raise InvalidRequest("iceberg_catalog_uri of a REST catalog takes only these parameters: "
                                 + ", ".join(URI_PARAMETERS))
        properties[key] = value
    return properties


class _TimeoutAdapter(HTTPAdapter):
    def send(self, request, **kwargs):
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = REQUEST_TIMEOUT
        return super().send(request, **kwargs)


class _BoundedRestCatalog(RestCatalog):
    """pyiceberg's RestCatalog whose HTTP requests time out (it sets none; pyiceberg 0.12 makes its
    sessions in `_create_session`, the one place to give them an adapter)."""

    def _create_session(self) -> Session:
        session = super()._create_session()
        adapter = _TimeoutAdapter()
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session


_MISSING = re.compile(r"^NotFoundException: .*?(\S+\.metadata\.json)\s*$")


def missing_metadata_file(message: str) -> Optional[str]:
    """The metadata file a server's error says it could not find (None: another error). A server
    that keeps only the location reads the file to answer loadTable (Iceberg's JdbcCatalog does), so
    the entry of a table whose folder was renamed or dropped cannot be loaded: its error names the file.
    >>> missing_metadata_file("NotFoundException: Failed to open input stream for file: /wh/s/t/metadata/v3.metadata.json")
    '/wh/s/t/metadata/v3.metadata.json'
    >>> missing_metadata_file("NotFoundException: Location does not exist: s3://b/wh/t/metadata/v1.metadata.json")
    's3://b/wh/t/metadata/v1.metadata.json'
    >>> missing_metadata_file("RuntimeIOException: Failed to read /wh/s/t/metadata/v3.metadata.json") is None
    True
    """
    match = _MISSING.match(message)
    return match.group(1) if match else None


def refuses_overwrite(error: Exception) -> bool:
    """Is this a server's answer to `register` with overwrite that it does not implement it?
    >>> refuses_overwrite(TableAlreadyExistsError("exists")), refuses_overwrite(NotImplementedError("x"))
    (True, True)
    >>> refuses_overwrite(RESTError("UnsupportedOperationException: Registering tables with overwrite is not supported"))
    True
    >>> refuses_overwrite(RESTError("BadRequestException: no such file"))
    False
    """
    if isinstance(error, (TableAlreadyExistsError, NotImplementedError)):
        return True
    return isinstance(error, RESTError) and str(error).startswith("UnsupportedOperationException")


class RestIcebergCatalog(IcebergCatalog):
    name = "the Iceberg REST catalog"

    def __init__(self, uri: str, client_name: str):
        self.properties = rest_properties(uri)
        self.client_name = client_name
        self._client: Optional[RestCatalog] = None
        self._lock = threading.Lock()
        self.overwrites: Optional[bool] = None   # does the server replace an entry with register+overwrite?

    def _rest(self) -> RestCatalog:
        with self._lock:
            if self._client is None:   # a server that could not be reached is asked again next time
                self._client = _BoundedRestCatalog(self.client_name, **self.properties)
            return self._client

    def check(self, schema: str, table: str) -> None:
        if "." in schema:
            raise InvalidRequest(f"schema name {schema!r} cannot be a namespace of the Iceberg catalog "
                                 "(iceberg_catalog_uri): a dot there separates nested namespaces")
        for kind, name in (("schema", schema), ("table", table)):
            if NAMESPACE_SEPARATOR in name:
                raise InvalidRequest(f"{kind} name cannot be held by the Iceberg REST catalog (iceberg_catalog_uri): "
                                     "it holds the character (U+001F) that separates nested namespaces")

    def entry(self, schema: str, table: str) -> Optional[str]:
        try:
            return self._rest().load_table((schema, table)).metadata_location
        except NoSuchTableError:
            return None
        except RESTError as e:
            gone = missing_metadata_file(str(e))
            if gone is None:
                raise
            return gone

    def create_entry(self, schema: str, table: str, metadata_location: str) -> bool:
        self.check(schema, table)
        rest = self._rest()
        try:
            rest.create_namespace_if_not_exists(schema)
        except NamespaceAlreadyExistsError:
            pass   # another writer made it between the two requests
        try:
            rest.register_table((schema, table), metadata_location)
        except TableAlreadyExistsError:
            return False
        return True

    def move_entry(self, schema: str, table: str, expected: str, metadata_location: str) -> bool:
        if self.entry(schema, table) != expected:
            return False
        rest = self._rest()
        if self.overwrites is not False:
            try:
                rest.register_table((schema, table), metadata_location, overwrite=True)
                self.overwrites = True
                return True
            except Exception as e:  # noqa: BLE001 - told apart just below
                if not refuses_overwrite(e):
                    raise
                self.overwrites = False
        return self._drop_and_register(rest, schema, table, expected, metadata_location)

    def _drop_and_register(self, rest: RestCatalog, schema: str, table: str, expected: str, new: str) -> bool:
        try:
            rest.drop_table((schema, table), purge_requested=False)
        except NoSuchTableError:
            return False   # dropped meanwhile: read again (it is then registered)
        try:
            rest.register_table((schema, table), new)
        except TableAlreadyExistsError:
            return False   # another writer registered it between the two requests: read again
        except Exception:
            try:
                rest.register_table((schema, table), expected)
            except Exception:  # noqa: BLE001 - the first failure is the one to report
                pass
            raise
        return True

    def drop_entry(self, schema: str, table: str, expected: str) -> None:
        if self.entry(schema, table) != expected:
            return
        try:
            self._rest().drop_table((schema, table), purge_requested=False)
        except NoSuchTableError:
            pass
