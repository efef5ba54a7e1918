"""Azure Blob Storage and ADLS Gen2: `abfss://container@account.dfs.core.windows.net/prefix`, the Blob
form `wasbs://container@account.blob.core.windows.net/prefix`, or `az://container/prefix` with the
account in the settings (`abfs://`, `wasb://`, `azure://` are read as `abfss://`, `wasbs://`, `az://`).

Settings: the `azure_*` fields (FIELDS here, gathered by settings.FIELDS) over the standard variables (AZURE_STORAGE_ACCOUNT_NAME,
AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN, AZURE_CLIENT_ID/AZURE_CLIENT_SECRET/AZURE_TENANT_ID,
and for Azurite AZURE_STORAGE_USE_EMULATOR with AZURITE_BLOB_STORAGE_URL); empty credentials leave each
client to Azure's own chain (managed identity, the Azure CLI). The destination's own client is pyarrow's
AzureFileSystem (no Azure SDK needed); delta-rs and embedded Sail reach the store through object_store.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import threading
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Callable, Mapping, TypeVar

from ..errors import InvalidRequest
from ..fields import BOOL, Field
from .files import Entry, Storage
from .store import Store

# Azurite's published development account (the same in every emulator install; not a secret).
EMULATOR_ACCOUNT = "devstoreaccount1"
EMULATOR_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
DEFAULT_EMULATOR_URL = "http://127.0.0.1:10000"

# setting attribute -> the standard variable (object_store's, read by Sail and delta-rs alike)
VARIABLE_OF = {
    "account_name": "AZURE_STORAGE_ACCOUNT_NAME",
    "account_key": "AZURE_STORAGE_ACCOUNT_KEY",
    "sas_token": "AZURE_STORAGE_SAS_TOKEN",
    "client_id": "AZURE_CLIENT_ID",
    "client_secret": "AZURE_CLIENT_SECRET",
    "tenant_id": "AZURE_TENANT_ID",
    "use_emulator": "AZURE_STORAGE_USE_EMULATOR",
    "emulator_url": "AZURITE_BLOB_STORAGE_URL",
}
AZURE_VARIABLES = tuple(VARIABLE_OF.values()) + ("AZURE_STORAGE_ENDPOINT", "AZURE_ALLOW_HTTP")

FIELDS = (
    Field("azure_account_name", "Azure storage account", "The account of an abfss://container@account.dfs.core.windows.net "
          "or az://container warehouse (empty: the one in the URL).", env="AZURE_STORAGE_ACCOUNT_NAME"),
    Field("azure_account_key", "Azure account key", "The storage account's shared key. Empty (and no SAS token or "
          "client secret): Azure's standard credential chain (managed identity, Azure CLI).", secret=True,
          env="AZURE_STORAGE_ACCOUNT_KEY"),
    Field("azure_sas_token", "Azure SAS token", "A shared access signature for the container.", secret=True,
          env="AZURE_STORAGE_SAS_TOKEN"),
    Field("azure_client_id", "Azure client ID", "A service principal's application (client) ID, with "
          "azure_client_secret and azure_tenant_id.", env="AZURE_CLIENT_ID"),
    Field("azure_client_secret", "Azure client secret", "The service principal's secret.", secret=True,
          env="AZURE_CLIENT_SECRET"),
    Field("azure_tenant_id", "Azure tenant ID", "The service principal's tenant (directory) ID.", env="AZURE_TENANT_ID"),
    Field("azure_use_emulator", "Azure storage emulator", "Reach Azurite (its development account unless "
          "azure_account_name is given) instead of Azure.", kind=BOOL, env="AZURE_STORAGE_USE_EMULATOR"),
    Field("azure_emulator_url", "Azurite Blob URL", "Where Azurite's Blob service listens (default "
          f"{DEFAULT_EMULATOR_URL}).", env="AZURITE_BLOB_STORAGE_URL"),
)


@dataclass(frozen=True)
class AzureOptions:
    """How to reach an Azure storage account (empty credentials: Azure's standard chain)."""

    account_name: str = ""
    account_key: str = field(default="", repr=False)
    sas_token: str = field(default="", repr=False)
    client_id: str = ""
    client_secret: str = field(default="", repr=False)
    tenant_id: str = ""
    use_emulator: bool = False
    emulator_url: str = ""

    @property
    def has_client_secret(self) -> bool:
        return bool(self.client_id and self.client_secret and self.tenant_id)

    @property
    def effective_account_key(self) -> str:
        """The emulator's published key stands in when no credential is given (as object_store does)."""
        if self.account_key or not self.use_emulator or self.sas_token or self.has_client_secret:
            return self.account_key
        return EMULATOR_KEY

    @property
    def effective_emulator_url(self) -> str:
        return (self.emulator_url or DEFAULT_EMULATOR_URL).rstrip("/")


@dataclass(frozen=True)
class AzureLocation:
    account: str      # "" when the URL does not say (az://container/...)
    container: str
    path: str         # inside the container, no leading slash


def parse_location(location: str) -> AzureLocation:
    """
    >>> parse_location("abfss://c@acct.dfs.core.windows.net/wh/t")
    AzureLocation(account='acct', container='c', path='wh/t')
    >>> parse_location("az://c/wh"), parse_location("abfss://c@acct.dfs.core.windows.net")
    (AzureLocation(account='', container='c', path='wh'), AzureLocation(account='acct', container='c', path=''))
    """
    authority, _, path = location.split("://", 1)[1].partition("/")
    container, at, host = authority.partition("@")
    return AzureLocation(host.split(".", 1)[0] if at else "", container, path.strip("/"))


def object_store_variables(options: AzureOptions) -> dict[str, str]:
    """object_store's Azure variables for a Sail process (only what is set)."""
    env = {}
    for attr, variable in VARIABLE_OF.items():
        value = getattr(options, attr)
        if attr == "use_emulator":
            value = "true" if value else ""
        if value:
            env[variable] = value
    if options.use_emulator and not options.emulator_url:
        env["AZURITE_BLOB_STORAGE_URL"] = DEFAULT_EMULATOR_URL
    return env


def delta_rs_options(options: AzureOptions) -> dict[str, str]:
    """delta-rs `storage_options`. object_store takes the emulator's URL from the process
    environment only, so the emulator is spelled as its account endpoint instead (Azurite
    addresses accounts in the path).
    >>> o = delta_rs_options(AzureOptions(use_emulator=True, emulator_url="http://127.0.0.1:9"))
    >>> o["azure_storage_endpoint"], o["azure_storage_account_name"], o["azure_allow_http"]
    ('http://127.0.0.1:9/devstoreaccount1', 'devstoreaccount1', 'true')
    """
    opts = {}
    account = options.account_name or (EMULATOR_ACCOUNT if options.use_emulator else "")
    if account:
        opts["azure_storage_account_name"] = account
    if options.effective_account_key:
        opts["azure_storage_account_key"] = options.effective_account_key
    if options.sas_token:
        opts["azure_storage_sas_token"] = options.sas_token
    if options.client_id:
        opts["azure_client_id"] = options.client_id
    if options.client_secret:
        opts["azure_client_secret"] = options.client_secret
    if options.tenant_id:
        opts["azure_tenant_id"] = options.tenant_id
    if options.use_emulator:
        url = options.effective_emulator_url
        opts["azure_storage_endpoint"] = f"{url}/{account}"
        if url.startswith("http://"):
            opts["azure_allow_http"] = "true"
    return opts


def environment_options(environ: Mapping[str, str]) -> AzureOptions:
    values = {attr: environ.get(variable, "") for attr, variable in VARIABLE_OF.items()}
    values["use_emulator"] = values["use_emulator"].strip().lower() in ("true", "1", "yes", "on")
    return AzureOptions(**values)


# Connection-level failures the Azure client does not retry itself: a server closing an idle
# keep-alive connection just as a request reuses it (met with Azurite under load; Azure's own
# front ends close idle connections too). Only idempotent calls are repeated.
T = TypeVar("T")
TRANSIENT_MARKERS = ("Connection was closed by the server", "Connection reset", "Broken pipe", "timed out")
ATTEMPTS = 4


def retried(call: Callable[[], T]) -> T:
    """`call()`, again after a short pause when it fails on a dropped connection.

    >>> calls = []
    >>> def flaky():
    ...     calls.append(1)
    ...     if len(calls) < 3:
    ...         raise OSError("Azure Error: [] Connection was closed by the server while trying to read a response")
    ...     return "ok"
    >>> retried(flaky), len(calls)
    ('ok', 3)
    """
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return call()
        except FileNotFoundError:
            raise
        except OSError as exc:
            if attempt == ATTEMPTS or not any(m in str(exc) for m in TRANSIENT_MARKERS):
                raise
            time.sleep(0.05 * 2 ** attempt)
    raise AssertionError("unreachable")


# ---- conditional creates (Put Blob with If-None-Match: *) --------------------------------------
# pyarrow's AzureFileSystem writes no conditional blob and the Azure SDK is not a dependency: the
# one request is signed here (Shared Key), or carries the SAS token, or a service principal's token.
BLOB_API_VERSION = "2020-10-02"   # Azurite and Azure both serve it; bearer tokens need >= 2017-11-09
AAD_V2_TOKEN_ENDPOINT = "https://login.microsoftonline.com/{tenant}/oauth2/v2.0/token"
STORAGE_SCOPE = "https://storage.azure.com/.default"


def blob_url(location: str, options: AzureOptions) -> str:
    """The Blob endpoint URL of a location's blob (the emulator's: the account in the path).
    >>> blob_url("abfss://c@a.dfs.core.windows.net/wh/v1.json", AzureOptions())
    'https://a.blob.core.windows.net/c/wh/v1.json'
    >>> blob_url("abfss://c@a.dfs.core.windows.net/wh/x y", AzureOptions(use_emulator=True))
    'http://127.0.0.1:10000/a/c/wh/x%20y'
    """
    from urllib.parse import quote

    loc, account = parse_location(location), account_of(location, options)
    path = quote(f"{loc.container}/{loc.path}", safe="/")
    if options.use_emulator:
        return f"{options.effective_emulator_url}/{account}/{path}"
    return f"https://{account}.blob.core.windows.net/{path}"


def shared_key_signature(account: str, key: str, verb: str, url: str, headers: Mapping[str, str]) -> str:
    """The Shared Key `Authorization` value of a request without query parameters (Azure Storage's
    string to sign: the standard headers in order, the x-ms-* headers, the canonical resource).
    >>> shared_key_signature("a", base64.b64encode(b"k").decode(), "PUT", "https://a.blob.core.windows.net/c/b",
    ...                      {"x-ms-date": "d", "x-ms-version": "v"})
    'SharedKey a:nH7iCkUntvqnf82EONRTrT8Rr9mU6A1aKfF1wvUNEgM='
    """
    from urllib.parse import urlparse

    h = {k.lower(): v for k, v in headers.items()}
    length = h.get("content-length", "")
    standard = [verb, h.get("content-encoding", ""), h.get("content-language", ""), "" if length == "0" else length,
                h.get("content-md5", ""), h.get("content-type", ""), h.get("date", ""), h.get("if-modified-since", ""),
                h.get("if-match", ""), h.get("if-none-match", ""), h.get("if-unmodified-since", ""), h.get("range", "")]
    canonical_headers = "".join(f"{k}:{h[k].strip()}\n" for k in sorted(h) if k.startswith("x-ms-"))
    to_sign = "\n".join(standard) + "\n" + canonical_headers + f"/{account}{urlparse(url).path}"
    digest = hmac.new(base64.b64decode(key), to_sign.encode("utf-8"), hashlib.sha256).digest()
    return f"SharedKey {account}:{base64.b64encode(digest).decode()}"


_TOKENS: dict[tuple[str, str], tuple[str, float]] = {}
_TOKENS_LOCK = threading.Lock()


def service_principal_token(options: AzureOptions) -> str:
    """A storage access token for the service principal (client credentials), kept until 5 minutes
    before it expires. The secret goes to Microsoft's token endpoint only."""
    import requests

    key = (options.tenant_id, options.client_id)
    with _TOKENS_LOCK:
        cached = _TOKENS.get(key)
        if cached is not None and cached[1] > time.time() + 300:
            return cached[0]
        now = time.time()
        answer = requests.post(AAD_V2_TOKEN_ENDPOINT.format(tenant=options.tenant_id), timeout=30, data={
            "grant_type": "client_credentials", "client_id": options.client_id,
            "client_secret": options.client_secret, "scope": STORAGE_SCOPE})
        if answer.status_code != 200:
            raise PermissionError(f"Microsoft's token endpoint refused the service principal (HTTP {answer.status_code})")
        body = answer.json()
        _TOKENS[key] = (body["access_token"], now + float(body.get("expires_in", 3600)))
        return body["access_token"]


def create_blob_if_absent(location: str, data: bytes, options: AzureOptions) -> bool:
    """Put Blob with `If-None-Match: *`: 409 (BlobAlreadyExists) or 412 when the blob exists.
    Not retried: a repeat of a create that went through would answer "exists" for this writer's
    own blob (the caller then gives up a commit that stood, which is safe; the reverse is not)."""
    import requests

    url = blob_url(location, options)
    account = account_of(location, options)
    headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": BLOB_API_VERSION, "x-ms-blob-type": "BlockBlob",
               "If-None-Match": "*", "Content-Type": "application/octet-stream", "Content-Length": str(len(data))}
    if options.effective_account_key:
        headers["Authorization"] = shared_key_signature(account, options.effective_account_key, "PUT", url, headers)
    elif options.sas_token:
        url += "?" + options.sas_token.lstrip("?")
    elif options.has_client_secret:
        headers["Authorization"] = f"Bearer {service_principal_token(options)}"
    else:
        raise PermissionError("no Azure credential to sign a conditional create with")
    answer = requests.put(url, data=data, headers=headers, timeout=60)
    if answer.status_code in (409, 412):
        return False
    if answer.status_code != 201:
        raise OSError(f"Azure Put Blob answered HTTP {answer.status_code} ({answer.headers.get('x-ms-error-code', '')})")
    return True


class AzureStorage(Storage):
    """Blobs under one account, through pyarrow's AzureFileSystem (Blob API; Azurite serves it)."""

    is_local = False
    can_list = True
    _filesystems: dict = {}

    @property
    def azure(self) -> AzureOptions:
        return self.options.azure

    def _account(self, location: str) -> str:
        account = parse_location(location).account or self.azure.account_name
        return account or (EMULATOR_ACCOUNT if self.azure.use_emulator else "")

    def _fs(self, location: str):
        from pyarrow import fs

        opts, account = self.azure, self._account(location)
        key = (account, self.options.identity())
        filesystem = self._filesystems.get(key)
        if filesystem is None:
            kwargs: dict = {"account_name": account}
            if opts.effective_account_key:
                kwargs["account_key"] = opts.effective_account_key
            elif opts.sas_token:
                kwargs["sas_token"] = opts.sas_token
            elif opts.has_client_secret:
                kwargs.update(client_id=opts.client_id, client_secret=opts.client_secret, tenant_id=opts.tenant_id)
            if opts.use_emulator:
                scheme, host = opts.effective_emulator_url.split("://", 1)
                kwargs.update(blob_storage_authority=host, dfs_storage_authority=host,
                              blob_storage_scheme=scheme, dfs_storage_scheme=scheme)
            filesystem = self._filesystems[key] = fs.AzureFileSystem(**kwargs)
        return filesystem

    @staticmethod
    def _path(location: str) -> str:
        loc = parse_location(location)
        return f"{loc.container}/{loc.path}".rstrip("/")

    def _location(self, location: str, path: str) -> str:
        """A pyarrow path (container/...) back as a URL of the same spelling as `location`."""
        root = location.split("://", 1)[0] + "://" + location.split("://", 1)[1].split("/", 1)[0]
        return f"{root}/{path.split('/', 1)[1]}" if "/" in path else root

    def list(self, location: str, recursive: bool = False) -> list[Entry]:
        """The entries under `location`. A folder Hadoop ABFS made on a flat-namespace account is
        also a blob of the folder's name (its marker): pyarrow lists it twice, as a file and as a
        folder, and only the folder is kept here."""
        from pyarrow import fs

        selector = fs.FileSelector(self._path(location), allow_not_found=True, recursive=recursive)
        try:
            infos = retried(lambda: self._fs(location).get_file_info(selector))
        except FileNotFoundError:
            return []
        folders = {info.path for info in infos if info.type == fs.FileType.Directory}
        out = []
        for info in infos:
            is_dir = info.type == fs.FileType.Directory
            if (recursive and is_dir) or (not is_dir and info.path in folders):
                continue
            mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
            out.append(Entry(self._location(location, info.path), is_dir, info.size or 0, mtime))
        return out

    def exists(self, location: str) -> bool:
        from pyarrow import fs

        return retried(lambda: self._fs(location).get_file_info(self._path(location)).type) != fs.FileType.NotFound

    def read_bytes(self, location: str) -> bytes:
        def read() -> bytes:
            with self._fs(location).open_input_stream(self._path(location)) as f:
                return f.read()
        return retried(read)

    def write_bytes(self, location: str, data: bytes) -> None:
        def write() -> None:   # a whole blob: writing it again is the same
            with self._fs(location).open_output_stream(self._path(location)) as f:
                f.write(data)
        retried(write)

    def create_if_absent(self, location: str, data: bytes) -> bool:
        return create_blob_if_absent(location, data, self.azure)

    def delete_file(self, location: str) -> None:
        """One blob. pyarrow then writes an empty marker blob for a parent folder it leaves empty
        (measured with pyarrow 26 on Azurite): that folder is removed too, marker and all
        (`delete_dir` writes none)."""
        from pyarrow import fs

        filesystem, path = self._fs(location), self._path(location)
        try:
            filesystem.delete_file(path)
        except FileNotFoundError:
            return
        parent = path.rsplit("/", 1)[0]
        if "/" in parent and not any(i.type == fs.FileType.File for i in filesystem.get_file_info(
                fs.FileSelector(parent, allow_not_found=True, recursive=True))):
            self._delete_dir(filesystem, parent)

    @staticmethod
    def _delete_dir(filesystem, path: str) -> None:
        try:
            retried(lambda: filesystem.delete_dir(path))
        except FileNotFoundError:
            pass

    def delete_tree(self, location: str) -> None:
        """Every blob under `location`, then the location's own blob: a blob, or the marker blob
        Hadoop ABFS writes for each folder it makes on a flat-namespace account (an empty blob of
        the folder's name, `hdi_isfolder`: `<table>`, `<table>/_delta_log`, ...). pyarrow reports
        a path that has such a marker as a file, so the marker cannot be what decides how the
        location is removed: it goes last, once nothing is under it (pyarrow's `delete_dir` takes
        every blob under the prefix, markers included, and writes none). A container itself stays."""
        from pyarrow import fs

        filesystem, path = self._fs(location), self._path(location)
        if "/" not in path:
            filesystem.delete_dir_contents(path, missing_dir_ok=True)
            return
        self._delete_dir(filesystem, path)
        if retried(lambda: filesystem.get_file_info(path).type) == fs.FileType.File:
            self.delete_file(location)


def object_store_path(location: str) -> str:
    """object_store (Sail, delta-rs) knows no `wasbs://`: the same container and account in
    the DFS spelling, which it reaches through the Blob API all the same.
    >>> object_store_path("wasbs://c@acct.blob.core.windows.net/wh"), object_store_path("az://c/wh")
    ('abfss://c@acct.dfs.core.windows.net/wh', 'az://c/wh')
    """
    if not location.startswith("wasbs://"):
        return location
    loc = parse_location(location)
    return f"abfss://{loc.container}@{loc.account}.dfs.core.windows.net" + (f"/{loc.path}" if loc.path else "")


# Hadoop ABFS (hadoop-azure 3.5.0, the Spark engine's Azure file system). Its WASB driver (wasb://)
# is a stub that refuses every call, so Spark reaches every Azure warehouse through ABFS: the DFS
# endpoint of an ADLS Gen2 account, or the Blob endpoint where there is no DFS one (Azurite, flat
# accounts) with `fs.azure.fns.account.service.type` BLOB. Every setting is per account (ABFS
# reads `<key>.<account>.dfs.core.windows.net` before `<key>`), so one engine serves accounts with
# different credentials side by side.
ABFS_DOMAIN = "dfs.core.windows.net"
AAD_TOKEN_ENDPOINT = "https://login.microsoftonline.com/{tenant}/oauth2/token"


def account_of(location: str, options: AzureOptions) -> str:
    """The account a location lives in: the URL's, else the settings', else the emulator's."""
    return parse_location(location).account or options.account_name or (EMULATOR_ACCOUNT if options.use_emulator else "")


def emulator_over_http(options: AzureOptions) -> bool:
    return options.use_emulator and options.effective_emulator_url.startswith("http://")


def abfs_path(location: str, options: AzureOptions) -> str:
    """A canonical Azure location as Hadoop's ABFS driver spells it: `abfss://` on the account's
    DFS host (its TLS form), `abfs://` for an emulator on plain HTTP (ABFS talks HTTPS for
    `abfss://` whatever else it is told).
    >>> abfs_path("wasbs://c@a.blob.core.windows.net/wh", AzureOptions())
    'abfss://c@a.dfs.core.windows.net/wh'
    >>> abfs_path("az://c/wh/t", AzureOptions(account_name="a", use_emulator=True))
    'abfs://c@a.dfs.core.windows.net/wh/t'
    """
    loc = parse_location(location)
    account = account_of(location, options)
    if not account:
        raise InvalidRequest(f"the Apache Spark engine needs the storage account of {location.split('/', 3)[2]}: "
                             "set azure_account_name (AZURE_STORAGE_ACCOUNT_NAME) or use "
                             "abfss://container@account.dfs.core.windows.net/...")
    scheme = "abfs" if emulator_over_http(options) else "abfss"
    return f"{scheme}://{loc.container}@{account}.{ABFS_DOMAIN}" + (f"/{loc.path}" if loc.path else "")


def abfs_conf(account: str, options: AzureOptions) -> dict[str, str]:
    """Hadoop ABFS settings for one account (only what the settings say: with no credential the
    engine's own Hadoop configuration decides, e.g. a cluster's managed identity).
    >>> conf = abfs_conf("a", AzureOptions(account_key="k"))
    >>> conf["fs.azure.account.auth.type.a.dfs.core.windows.net"], conf["fs.azure.account.key.a.dfs.core.windows.net"]
    ('SharedKey', 'k')
    """
    host = f"{account}.{ABFS_DOMAIN}"
    conf: dict[str, str] = {}

    def put(key: str, value: str) -> None:
        conf[f"{key}.{host}"] = value

    if options.use_emulator:
        scheme, authority = options.effective_emulator_url.split("://", 1)
        # host:port instead of the account's host; ABFS then puts the account in the path, as
        # Azurite addresses accounts. Azurite has no DFS endpoint: Blob, and no namespace.
        authority = authority.split("/", 1)[0]
        if ":" not in authority:   # ABFS takes the override only as host:port
            authority += ":80" if scheme == "http" else ":443"
        put("fs.azure.abfs.endpoint", authority)
        put("fs.azure.account.hns.enabled", "false")
        put("fs.azure.fns.account.service.type", "BLOB")
        if scheme == "http":
            # Read without the account suffix (measured with hadoop-azure 3.5.0: the per-account
            # key left it on HTTPS, "Unsupported or unrecognized SSL message"); only abfs:// URLs,
            # which this store spells for an emulator on HTTP alone, are affected.
            conf["fs.azure.always.use.https"] = "false"
            # ABFS's default Apache HTTP client fails a plain-HTTP connection ("SSL socket factory
            # may not be null"); the JDK's client speaks HTTP.
            conf["fs.azure.networking.library"] = "JDK_HTTP_URL_CONNECTION"
    if options.effective_account_key:
        put("fs.azure.account.auth.type", "SharedKey")
        put("fs.azure.account.key", options.effective_account_key)
    elif options.sas_token:
        put("fs.azure.account.auth.type", "SAS")
        put("fs.azure.sas.fixed.token", options.sas_token.lstrip("?"))
    elif options.has_client_secret:
        put("fs.azure.account.auth.type", "OAuth")
        put("fs.azure.account.oauth.provider.type", "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider")
        put("fs.azure.account.oauth2.client.endpoint", AAD_TOKEN_ENDPOINT.format(tenant=options.tenant_id))
        put("fs.azure.account.oauth2.client.id", options.client_id)
        put("fs.azure.account.oauth2.client.secret", options.client_secret)
    return conf


class AzureStore(Store):
    name = "azure"
    fields = FIELDS
    options_type = AzureOptions
    place_noun = "container"
    schemes = ("abfss", "wasbs", "az")
    # The spellings lineage's URIs use too (lineage/uris.py): TLS forms, `az` for object_store's short one.
    aliases = {"abfs": "abfss", "wasb": "wasbs", "azure": "az"}
    storage_class = AzureStorage
    variables = AZURE_VARIABLES
    local_spark_jar = "hadoop-azure-"       # ABFS (jvm/pom.xml, fetched by `make install`)

    def check(self, options) -> None:
        azure = options.azure
        if azure.client_secret and not (azure.client_id and azure.tenant_id):
            raise InvalidRequest("azure_client_secret needs azure_client_id and azure_tenant_id")
        if azure.emulator_url and not azure.emulator_url.startswith(("http://", "https://")):
            raise InvalidRequest("azure_emulator_url must be an http:// or https:// URL")

    def delta_rs_options(self, options) -> dict[str, str]:
        return delta_rs_options(options.azure)

    def object_store_path(self, location: str) -> str:
        return object_store_path(location)

    def pyarrow_path(self, location: str) -> str:
        """pyarrow's AzureFileSystem takes `container/path`: no account (its own `from_uri` drops it).
        >>> STORE.pyarrow_path("abfss://c@a.dfs.core.windows.net/wh/t/v1.metadata.json")
        'c/wh/t/v1.metadata.json'
        """
        loc = parse_location(location)
        return f"{loc.container}/{loc.path}".rstrip("/")

    def create_if_absent_refusal(self, location: str, options) -> str:
        """Put Blob If-None-Match needs a credential this process signs with, and readers of the
        Iceberg metadata need the account in every location (`az://` has none)."""
        azure = options.azure
        if location.split("://", 1)[0] == "az":
            return ("Iceberg readers resolve Azure files by their account: give the warehouse as "
                    "abfss://container@account.dfs.core.windows.net/... instead of az://")
        if not account_of(location, azure):
            return "the storage account is unknown: set azure_account_name or use abfss://container@account..."
        if not (azure.effective_account_key or azure.sas_token or azure.has_client_secret):
            return ("Azure's default credential chain (managed identity, Azure CLI) is not one the destination "
                    "signs its conditional creates with: set azure_account_key, azure_sas_token or "
                    "azure_client_id with azure_client_secret and azure_tenant_id")
        return ""

    def iceberg_io_properties(self, location: str, options) -> dict[str, str]:
        """PyArrowFileIO's ADLS properties (pyarrow's AzureFileSystem); an emulator's authority and
        scheme stand in for Azure's hosts, as AzureStorage does."""
        azure = options.azure
        props = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
        account = account_of(location, azure)
        if account:
            props["adls.account-name"] = account
        if azure.effective_account_key:
            props["adls.account-key"] = azure.effective_account_key
        elif azure.sas_token:
            props["adls.sas-token"] = azure.sas_token
        elif azure.has_client_secret:
            props.update({"adls.client-id": azure.client_id, "adls.client-secret": azure.client_secret,
                          "adls.tenant-id": azure.tenant_id})
        if azure.use_emulator:
            scheme, host = azure.effective_emulator_url.split("://", 1)
            props.update({"adls.blob-storage-authority": host, "adls.dfs-storage-authority": host,
                          "adls.blob-storage-scheme": scheme, "adls.dfs-storage-scheme": scheme})
        return props

    def served_by_environment(self, options, environ: Mapping[str, str]) -> bool:
        env, given = environment_options(environ), options.azure
        return all(not getattr(given, a) or getattr(given, a) == getattr(env, a) for a in VARIABLE_OF)

    def sail_environment(self, options) -> dict[str, str]:
        return object_store_variables(options.azure)

    def hadoop_conf(self, root: str, options) -> dict[str, str]:
        """ABFS settings for the warehouse's account (per account: see abfs_conf)."""
        account = account_of(root, options.azure)
        return abfs_conf(account, options.azure) if account else {}

    def spark_path(self, location: str, options=None) -> str:
        return abfs_path(location, options.azure if options is not None else AzureOptions())

    def spark_filesystem(self, location: str, options) -> str:
        """Hadoop caches one ABFS client per container and account per JVM."""
        return abfs_path(location, options.azure).split("://", 1)[1].split("/", 1)[0]


STORE = AzureStore()
