"""Google Cloud Storage: `gs://bucket/prefix` (`gcs://` is read as `gs://`).

Settings: the `gcs_*` fields (FIELDS here, gathered by settings.FIELDS) over the standard variables: GOOGLE_SERVICE_ACCOUNT_KEY (a
service account key JSON, as object_store reads it; for an emulator it may carry `gcs_base_url` and
`disable_oauth`), GOOGLE_APPLICATION_CREDENTIALS (the path of a key file) and STORAGE_EMULATOR_HOST (an
emulator's URL, as Google's own client libraries read it). No credential at all: each client's default
chain (GOOGLE_APPLICATION_CREDENTIALS, gcloud's application default credentials, the metadata server).

Engines. The Apache Spark engine reaches GCS through Hadoop's GCS connector (gcs-connector, fetched into
.spark-jars by `make install`) and commits with Delta's GCSLogStore (a create with a generation
precondition: safe for concurrent writers). Embedded Sail would reach it through object_store, whose GCS
client speaks the XML API (object PUT with `x-goog-if-generation-match: 0` for each commit, list with
`list-type=2`); no emulator served by a package registry takes those requests (docs/object-storage.md,
"Google Cloud Storage"), so commits on the embedded engine could not be proven: it refuses a GCS warehouse
(`embedded_refusal`) and engine `auto` sends every GCS request to Apache Spark.

The destination's own client (staging Parquet, probes, trash notes, listings, Delta log reads of the
memory guard) is pyarrow's GcsFileSystem (the JSON API, which the emulators serve).
"""
from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Mapping

from ..errors import InvalidRequest, UnsupportedOperation
from ..fields import Field
from .files import Entry, Storage
from .store import Store

# setting attribute -> the standard variable
VARIABLE_OF = {
    "service_account_key": "GOOGLE_SERVICE_ACCOUNT_KEY",
    "credentials_file": "GOOGLE_APPLICATION_CREDENTIALS",
    "endpoint": "STORAGE_EMULATOR_HOST",
}
# What object_store reads of a Sail process's environment for GCS (and the emulator variable above).
GCS_VARIABLES = tuple(VARIABLE_OF.values()) + ("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH",
                                               "GOOGLE_BUCKET", "GOOGLE_BUCKET_NAME")
FIELDS = (
    Field("gcs_service_account_key", "GCS service account key", "The JSON key of a Google service account for a "
          "gs://bucket/prefix warehouse (for an emulator it may carry gcs_base_url and disable_oauth, as object_store "
          "reads it). The Apache Spark engine's GCS connector takes keys from files only (gcs_credentials_file): it "
          "refuses a key with a private key. Empty: gcs_credentials_file, else Google's default chain (gcloud's "
          "application default credentials, the metadata server).", secret=True, env="GOOGLE_SERVICE_ACCOUNT_KEY"),
    Field("gcs_credentials_file", "GCS credentials file", "The path of a service account key file, as "
          "GOOGLE_APPLICATION_CREDENTIALS names it (readable by the destination and, for a remote Spark server, "
          "at the same path there).", env="GOOGLE_APPLICATION_CREDENTIALS"),
    Field("gcs_endpoint", "GCS endpoint URL", "A GCS emulator or private endpoint, e.g. http://127.0.0.1:4443 "
          "(without credentials: no OAuth, as Google's clients treat STORAGE_EMULATOR_HOST). Empty: Google Cloud "
          "Storage.", env="STORAGE_EMULATOR_HOST"),
)
TOKEN_URI = "https://oauth2.googleapis.com/token"
SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"

EMBEDDED_REFUSAL = (
    "the embedded Sail engine does not serve Google Cloud Storage warehouses: its object_store client writes "
    "through GCS's XML API, which no emulator available here serves, so its commits are untested; use engine "
    "auto (Apache Spark serves gs:// warehouses), engine spark, or a spark_remote server")


class InvalidKey(ValueError):
    """A service account key that is not a JSON object (the message never holds the key)."""


@dataclass(frozen=True)
class GcsOptions:
    """How to reach Google Cloud Storage (empty: each client's default credential chain)."""

    service_account_key: str = field(default="", repr=False)   # the key JSON itself (secret)
    credentials_file: str = ""                                # a key file's path (GOOGLE_APPLICATION_CREDENTIALS)
    endpoint: str = ""                                        # an emulator's or private endpoint's URL

    @property
    def key(self) -> dict:
        """The service account key as a dict ({} when none is given)."""
        return parse_key(self.service_account_key)

    @property
    def effective_endpoint(self) -> str:
        """The endpoint setting, else the key's `gcs_base_url` ('' = Google's own).
        >>> GcsOptions(endpoint="127.0.0.1:4443").effective_endpoint
        'http://127.0.0.1:4443'
        >>> GcsOptions(service_account_key='{"gcs_base_url": "http://h:1/", "disable_oauth": true}').effective_endpoint
        'http://h:1'
        """
        url = self.endpoint or str(self.key.get("gcs_base_url") or "")
        if url and "://" not in url:
            url = "http://" + url          # STORAGE_EMULATOR_HOST is often given as host:port
        return url.rstrip("/")

    @property
    def anonymous(self) -> bool:
        """No OAuth at all: the key says `disable_oauth`, or an endpoint is given with no credential
        (an emulator, as Google's clients treat STORAGE_EMULATOR_HOST)."""
        key = self.key
        if key.get("disable_oauth"):
            return True
        return bool(self.endpoint) and not key.get("private_key") and not self.credentials_file

    @property
    def has_private_key(self) -> bool:
        key = self.key
        return bool(key.get("private_key") and key.get("client_email")) and not key.get("disable_oauth")


def parse_key(text: str) -> dict:
    """A key JSON as a dict; an error names no part of it.
    >>> parse_key(""), parse_key('{"disable_oauth": true}')
    ({}, {'disable_oauth': True})
    >>> parse_key("not json")
    Traceback (most recent call last):
    ...
    delta_destination.storage.gcs.InvalidKey: gcs_service_account_key is not a service account key JSON object
    """
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise InvalidKey("gcs_service_account_key is not a service account key JSON object") from None
    return value


def object_store_key(options: GcsOptions) -> str:
    """The key JSON object_store reads (`google_service_account_key`, GOOGLE_SERVICE_ACCOUNT_KEY): the
    given key with the endpoint and `disable_oauth` folded in, or, for an emulator without a key, one
    made of those alone ('' when neither is needed).
    >>> json.loads(object_store_key(GcsOptions(endpoint="http://127.0.0.1:9")))["gcs_base_url"]
    'http://127.0.0.1:9'
    >>> object_store_key(GcsOptions())
    ''
    """
    key = options.key
    if not key and not options.endpoint:
        return ""
    if options.endpoint:
        key = {"client_email": "", "private_key": "", "private_key_id": "", **key,
               "gcs_base_url": options.effective_endpoint}
        if options.anonymous:
            key["disable_oauth"] = True
    return options.service_account_key if key == options.key else json.dumps(key)


def delta_rs_options(options: GcsOptions) -> dict[str, str]:
    """delta-rs `storage_options` (object_store's GoogleConfigKey names; only what is set).
    >>> o = delta_rs_options(GcsOptions(endpoint="http://127.0.0.1:9"))
    >>> sorted(o), json.loads(o["google_service_account_key"])["disable_oauth"]
    (['allow_http', 'google_service_account_key'], True)
    """
    opts = {}
    key = object_store_key(options)
    if key:
        opts["google_service_account_key"] = key
    if options.credentials_file:
        opts["google_application_credentials"] = options.credentials_file
    if options.effective_endpoint.startswith("http://"):
        opts["allow_http"] = "true"
    return opts


def object_store_variables(options: GcsOptions) -> dict[str, str]:
    """object_store's GCS variables for a Sail process (only what is set)."""
    env = {}
    key = object_store_key(options)
    if key:
        env["GOOGLE_SERVICE_ACCOUNT_KEY"] = key
    if options.credentials_file:
        env["GOOGLE_APPLICATION_CREDENTIALS"] = options.credentials_file
    return env


def environment_options(environ: Mapping[str, str]) -> GcsOptions:
    return GcsOptions(**{attr: environ.get(variable, "") for attr, variable in VARIABLE_OF.items()})


# The GCS connector's classes, and its sizes in bytes: Hadoop 3.5's core-default.xml (pyspark's
# hadoop-client-api) names its own gs:// file system (hadoop-gcp, not shipped) and gives these sizes
# with unit suffixes ("64m"), which the connector reads as plain numbers (NumberFormatException).
CONNECTOR_CONF = {
    "fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
    "fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
    "fs.gs.block.size": str(64 << 20),
    "fs.gs.rewrite.max.chunk.size": str(512 << 20),
    "fs.gs.outputstream.buffer.size": str(8 << 20),
    "fs.gs.inputstream.inplace.seek.limit": str(8 << 20),
    "fs.gs.inputstream.min.range.request.size": str(2 << 20),
    # Parquet's vectored reads call Hadoop 3.4's VectoredReadUtils.validateRangeRequest(FileRange),
    # gone in Hadoop 3.5, through the connector (NoSuchMethodError on every Parquet read): plain reads.
    "parquet.hadoop.vectored.io.enabled": "false",
}


def hadoop_conf(options: GcsOptions) -> dict[str, str]:
    """Hadoop settings of the GCS connector (3.x) for these options; empty options leave it to
    its default chain (application default credentials, then the metadata server).
    >>> c = hadoop_conf(GcsOptions(endpoint="http://127.0.0.1:9"))
    >>> c["fs.gs.storage.root.url"], c["fs.gs.auth.type"]
    ('http://127.0.0.1:9', 'UNAUTHENTICATED')
    >>> hadoop_conf(GcsOptions(credentials_file="/k.json"))["fs.gs.auth.service.account.json.keyfile"]
    '/k.json'

    A key JSON with a private key is refused (the connector 3.x reads keys from files only).
    """
    conf = dict(CONNECTOR_CONF)
    endpoint = options.effective_endpoint
    if endpoint:
        conf["fs.gs.storage.root.url"] = endpoint
    key = options.key
    if key.get("project_id"):
        conf["fs.gs.project.id"] = str(key["project_id"])
    if options.anonymous:
        conf["fs.gs.auth.type"] = "UNAUTHENTICATED"
    elif options.has_private_key:
        # The connector 3.x takes a service account only as a key file (fs.gs.auth.service.account.json.
        # keyfile; its 2.x settings for the key's parts are gone), and the key is never written to a file.
        raise UnsupportedOperation(
            "the Apache Spark engine's GCS connector takes a service account key as a file only: give its path "
            "in gcs_credentials_file (GOOGLE_APPLICATION_CREDENTIALS) instead of gcs_service_account_key, or "
            "leave both empty for Google's default chain")
    elif options.credentials_file:
        conf["fs.gs.auth.type"] = "SERVICE_ACCOUNT_JSON_KEYFILE"
        conf["fs.gs.auth.service.account.json.keyfile"] = options.credentials_file
    else:
        conf["fs.gs.auth.type"] = "APPLICATION_DEFAULT"
    return conf


# ---- the destination's own client ------------------------------------------------------------

def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def signed_assertion(key: dict, now: float) -> str:
    """The JWT a service account exchanges for an access token (RS256, an hour's lifetime).
    >>> from cryptography.hazmat.primitives.asymmetric import rsa
    >>> from cryptography.hazmat.primitives import serialization
    >>> pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
    ...     serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    >>> jwt = signed_assertion({"client_email": "a@b", "private_key": pem, "private_key_id": "k"}, 1000.0)
    >>> json.loads(base64.urlsafe_b64decode(jwt.split(".")[1] + "==")) == {
    ...     "iss": "a@b", "scope": SCOPE, "aud": TOKEN_URI, "iat": 1000, "exp": 4600}
    True
    """
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    header = {"alg": "RS256", "typ": "JWT", "kid": key.get("private_key_id", "")}
    claims = {"iss": key["client_email"], "scope": SCOPE, "aud": key.get("token_uri") or TOKEN_URI,
              "iat": int(now), "exp": int(now) + 3600}
    signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
    private = serialization.load_pem_private_key(key["private_key"].encode(), password=None)
    signature = private.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64url(signature)}"


def access_token(key: dict) -> tuple[str, float]:
    """An OAuth access token for a service account key, and when it expires (seconds since the
    epoch). The key never leaves this process but to Google's token endpoint."""
    import requests

    now = time.time()
    answer = requests.post(key.get("token_uri") or TOKEN_URI, timeout=30, data={
        "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": signed_assertion(key, now)})
    if answer.status_code != 200:
        raise PermissionError(f"Google's token endpoint refused the service account key (HTTP {answer.status_code})")
    body = answer.json()
    return body["access_token"], now + float(body.get("expires_in", 3600))


_TOKENS: dict[tuple[str, str], tuple[str, float]] = {}
_TOKENS_LOCK = threading.Lock()


def signing_key(options: GcsOptions) -> dict:
    """The service account key this process signs token requests with: the key setting's, else a
    service account key file's ({} when neither holds one)."""
    if options.has_private_key:
        return options.key
    if options.credentials_file:
        try:
            with open(options.credentials_file, "rb") as f:
                key = json.loads(f.read())
        except (OSError, ValueError):
            return {}
        if isinstance(key, dict) and key.get("type") == "service_account" and key.get("private_key"):
            return key
    return {}


def cached_access_token(key: dict) -> tuple[str, float]:
    """`access_token(key)`, kept until 5 minutes before it expires."""
    ident = (str(key.get("client_email", "")), str(key.get("private_key_id", "")))
    with _TOKENS_LOCK:
        cached = _TOKENS.get(ident)
        if cached is None or cached[1] <= time.time() + 300:
            cached = _TOKENS[ident] = access_token(key)
        return cached


def create_object_if_absent(location: str, data: bytes, options: GcsOptions) -> bool:
    """A JSON-API upload with `ifGenerationMatch=0`: 412 when the object exists. A multipart upload:
    fake-gcs-server checks the precondition on those only (measured: a media upload of an existing
    object with it answers 200; tests/engines/test_iceberg_stores.py), GCS itself on every kind. Not
    retried (a repeat of a create that went through would see this writer's own object)."""
    import uuid
    from urllib.parse import quote

    import requests

    bucket, _, name = location.split("://", 1)[1].partition("/")
    base = options.effective_endpoint or "https://storage.googleapis.com"
    url = f"{base}/upload/storage/v1/b/{quote(bucket, safe='')}/o?uploadType=multipart&ifGenerationMatch=0"
    boundary = "delta-destination-" + uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode()
            + json.dumps({"name": name}).encode() + f"\r\n--{boundary}\r\nContent-Type: application/octet-stream"
            "\r\n\r\n".encode() + data + f"\r\n--{boundary}--\r\n".encode())
    headers = {"Content-Type": f"multipart/related; boundary={boundary}"}
    if not options.anonymous:
        key = signing_key(options)
        if not key:
            raise PermissionError("no service account key to sign a conditional create with")
        headers["Authorization"] = f"Bearer {cached_access_token(key)[0]}"
    answer = requests.post(url, data=body, headers=headers, timeout=60)
    if answer.status_code == 412:
        return False
    if answer.status_code != 200:
        raise OSError(f"GCS upload answered HTTP {answer.status_code}")
    return True


class GcsStorage(Storage):
    """Objects of GCS buckets through pyarrow's GcsFileSystem (JSON API)."""

    is_local = False
    can_list = True
    _filesystems: dict = {}        # options identity -> (filesystem, expiry)
    _lock = threading.Lock()

    @property
    def gcs(self) -> GcsOptions:
        return self.options.gcs

    def _fs(self):
        from datetime import datetime, timedelta, timezone

        from pyarrow import fs

        ident = self.options.identity()
        with self._lock:
            cached = self._filesystems.get(ident)
            if cached is not None and cached[1] > time.time() + 300:
                return cached[0]
            opts = self.gcs
            kwargs: dict = {"retry_time_limit": timedelta(seconds=30)}
            endpoint = opts.effective_endpoint
            if endpoint:
                scheme, host = endpoint.split("://", 1)
                kwargs.update(scheme=scheme, endpoint_override=host)
            expiry = float("inf")
            if opts.anonymous:
                kwargs["anonymous"] = True
            elif opts.has_private_key:
                token, expiry = access_token(opts.key)
                kwargs.update(access_token=token,
                              credential_token_expiration=datetime.fromtimestamp(expiry, tz=timezone.utc))
            # else: google-cloud-cpp's default chain (GOOGLE_APPLICATION_CREDENTIALS, gcloud, metadata server)
            filesystem = fs.GcsFileSystem(**kwargs)
            self._filesystems[ident] = (filesystem, expiry)
            return filesystem

    @staticmethod
    def _path(location: str) -> str:
        return location.split("://", 1)[1].rstrip("/")

    def _location(self, path: str) -> str:
        return f"{self.scheme}://{path}"

    def list(self, location: str, recursive: bool = False) -> list[Entry]:
        """GCS has no folders: a recursive listing of the prefix, folded into its first level when
        not `recursive` (the emulators answer pyarrow's delimited listing with no prefixes)."""
        from pyarrow import fs

        base = self._path(location)
        try:
            infos = self._fs().get_file_info(fs.FileSelector(base, allow_not_found=True, recursive=True))
        except FileNotFoundError:
            return []
        out: list[Entry] = []
        folders: set[str] = set()
        for info in infos:
            if not info.path.startswith(base + "/"):
                continue
            rest = info.path[len(base) + 1:]
            if info.type != fs.FileType.File:   # a folder marker object (`name/`, the GCS connector's)
                if not recursive:
                    folders.add(rest.split("/", 1)[0])
                continue
            if not recursive and "/" in rest:
                folders.add(rest.split("/", 1)[0])
                continue
            mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
            out.append(Entry(self._location(info.path), False, info.size or 0, mtime))
        out.extend(Entry(self._location(f"{base}/{name}"), True, 0, 0.0) for name in sorted(folders))
        return out

    def exists(self, location: str) -> bool:
        from pyarrow import fs

        if self._fs().get_file_info(self._path(location)).type == fs.FileType.File:
            return True
        return bool(self.list(location, recursive=True))

    def read_bytes(self, location: str) -> bytes:
        with self._fs().open_input_stream(self._path(location)) as f:
            return f.read()

    def write_bytes(self, location: str, data: bytes) -> None:
        with self._fs().open_output_stream(self._path(location)) as f:
            f.write(data)

    def create_if_absent(self, location: str, data: bytes) -> bool:
        return create_object_if_absent(location, data, self.gcs)

    def delete_file(self, location: str) -> None:
        try:
            self._fs().delete_file(self._path(location))
        except FileNotFoundError:
            pass

    def delete_tree(self, location: str) -> None:
        """Every object under `location` (and the location itself when it is an object), then the
        folder marker objects the GCS connector writes (`_delta_log/`): pyarrow's delete_dir removes
        what is left under the prefix and answers NotFound when the prefix has no marker of its own."""
        for entry in self.list(location, recursive=True):
            self.delete_file(entry.location)
        self.delete_file(location)
        from pyarrow import fs

        filesystem, path = self._fs(), self._path(location)
        if "/" not in path:
            return
        left = filesystem.get_file_info(fs.FileSelector(path, allow_not_found=True, recursive=True))
        if left or filesystem.get_file_info(path).type == fs.FileType.Directory:
            try:
                filesystem.delete_dir(path)
            except FileNotFoundError:
                pass


class GcsStore(Store):
    name = "gcs"
    fields = FIELDS
    options_type = GcsOptions
    schemes = ("gs",)
    aliases = {"gcs": "gs"}
    storage_class = GcsStorage
    variables = GCS_VARIABLES
    embedded_reaches = False
    embedded_refusal = EMBEDDED_REFUSAL

    def check(self, options) -> None:
        gcs = options.gcs
        try:
            gcs.key
        except InvalidKey as exc:   # names the setting, never the key
            raise InvalidRequest(str(exc)) from None
        if gcs.endpoint and "://" in gcs.endpoint and not gcs.endpoint.startswith(("http://", "https://")):
            raise InvalidRequest("gcs_endpoint must be an http:// or https:// URL (or host:port)")

    def delta_rs_options(self, options) -> dict[str, str]:
        return delta_rs_options(options.gcs)

    def create_if_absent_refusal(self, location: str, options) -> str:
        """A conditional upload needs a token this process gets itself: from a service account key
        (the setting, or a key file), or none for an emulator."""
        gcs = options.gcs
        if gcs.anonymous or signing_key(gcs):
            return ""
        return ("Google's default credential chain (gcloud, the metadata server) is not one the destination gets "
                "tokens from for its conditional creates: set gcs_service_account_key or gcs_credentials_file "
                "(a service account key file)")

    def iceberg_io_properties(self, location: str, options) -> dict[str, str]:
        """PyArrowFileIO's GCS properties (pyarrow's GcsFileSystem): an access token of the service
        account key; an emulator takes any token (pyiceberg has no anonymous GCS setting)."""
        gcs = options.gcs
        props = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
        if gcs.effective_endpoint:
            props["gcs.service.host"] = gcs.effective_endpoint
        if gcs.anonymous:
            token, expiry = "emulator", time.time() + 365 * 86400
        elif signing_key(gcs):
            token, expiry = cached_access_token(signing_key(gcs))
        else:
            return props   # google-cloud-cpp's default chain
        props.update({"gcs.oauth2.token": token, "gcs.oauth2.token-expires-at": str(int(expiry * 1000))})
        return props

    def served_by_environment(self, options, environ: Mapping[str, str]) -> bool:
        env, given = environment_options(environ), options.gcs
        return all(not getattr(given, a) or getattr(given, a) == getattr(env, a) for a in VARIABLE_OF)

    def environment_defaults(self, environ: Mapping[str, str]) -> dict[str, str]:
        # object_store knows no STORAGE_EMULATOR_HOST: the emulator is spelled in its key variable.
        given = environment_options(environ)
        if given.endpoint and "GOOGLE_SERVICE_ACCOUNT_KEY" not in environ:
            return object_store_variables(given)
        return {}

    def sail_environment(self, options) -> dict[str, str]:
        return object_store_variables(options.gcs)

    def spark_filesystem(self, location: str, options) -> str:
        """Hadoop caches one GCS connector client per bucket per JVM."""
        return location.split("://", 1)[1].split("/", 1)[0]

    def hadoop_conf(self, root: str, options) -> dict[str, str]:
        return hadoop_conf(options.gcs)


STORE = GcsStore()
