"""The files under a warehouse root, on a local disk or an object store, for the destination's
own work on them: listing tables and their commit files, removing its private areas
(staged batches, setup probes, dropped tables), writing staged Parquet, and the options
every other reader of the store needs (delta-rs).

Table data is written by the engines only; this module never writes into a table.

Locations are spelled canonically: an absolute local path, or `s3://bucket/key` (`s3a://`,
the Hadoop spelling, is read as `s3://`; the Spark dialect speaks `s3a://` itself). S3 is
reached with boto3, configured from `StorageOptions`; empty options leave each client to its
standard credential chain (environment, profile, instance role).

Other stores map onto the same options (documented in the README, not built here):
ADLS `abfss://container@account.dfs.core.windows.net/prefix` (delta-rs `azure_storage_account_name`
/ `azure_storage_account_key` or a client secret; Hadoop `fs.azure.account.key.<account>.dfs.core.windows.net`),
GCS `gs://bucket/prefix` (delta-rs `google_service_account`; Hadoop `google.cloud.auth.service.account.json.keyfile`).
"""
from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

import pyarrow as pa

OBJECT_STORE_SCHEMES = ("s3",)
SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}
# Staged Parquet parts encoded at once: one per core, at most 4 (each holds one part's buffer).
PARQUET_PART_WRITERS = max(1, min(4, os.cpu_count() or 1))


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/")


def url_scheme(path: str) -> str:
    """A URL's scheme ('' for a local path); `dbfs:/x`, with one slash, is a URL too.
    >>> url_scheme("s3a://b/k"), url_scheme("/data/wh"), url_scheme("file:///x"), url_scheme("dbfs:/mnt/wh")
    ('s3a', '', 'file', 'dbfs')
    """
    m = _SCHEME.match(path)
    return m.group(1).lower() if m else ""


def is_url(path: str) -> bool:
    return bool(url_scheme(path))


def canonical(path: str) -> str:
    """One spelling per place: `s3a://b/k/` -> `s3://b/k`, `file:///x` and `file://localhost/x`
    -> `/x`, `~/x` -> absolute. A `file://` URL naming another host is not a local path: it
    stays a URL.
    >>> canonical("s3a://bucket/wh/"), canonical("file:///tmp/wh"), canonical("file://localhost/tmp/wh")
    ('s3://bucket/wh', '/tmp/wh', '/tmp/wh')
    >>> canonical("FILE://LocalHost/tmp/wh/"), canonical("file://nas/share/wh/")
    ('/tmp/wh', 'file://nas/share/wh')
    """
    scheme = url_scheme(path)
    if scheme == "file":
        authority, slash, rest = path.split("://", 1)[1].partition("/")
        if authority.lower() in ("", "localhost"):
            path = slash + rest
            scheme = ""
    if not scheme:
        return os.path.abspath(os.path.expanduser(path))
    if "://" not in path:
        return path.rstrip("/")           # scheme:/path (dbfs:/...): no authority
    rest = path.split("://", 1)[1].rstrip("/")
    return f"{SCHEME_ALIASES.get(scheme, scheme)}://{rest}"


@dataclass(frozen=True)
class StorageOptions:
    """How to reach an object-store warehouse (empty = each client's standard chain)."""

    endpoint: str = ""
    region: str = ""
    access_key_id: str = ""
    secret_access_key: str = field(default="", repr=False)
    session_token: str = field(default="", repr=False)
    path_style: Optional[bool] = None

    @property
    def has_keys(self) -> bool:
        return bool(self.access_key_id and self.secret_access_key)

    @property
    def effective_path_style(self) -> bool:
        """Path-style unless told otherwise wherever an endpoint is given (S3-compatible stores
        and IP endpoints need it; AWS S3 itself takes both)."""
        return self.path_style if self.path_style is not None else bool(self.endpoint)

    @property
    def allow_http(self) -> bool:
        return self.endpoint.startswith("http://")

    def identity(self) -> str:
        """A stable, non-reversible name of these options (caches key on it; never the secret).
        >>> StorageOptions(secret_access_key="x").identity() != StorageOptions(secret_access_key="y").identity()
        True
        """
        text = "\0".join([self.endpoint, self.region, self.access_key_id, self.secret_access_key,
                          self.session_token, str(self.path_style)])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def delta_rs(self) -> dict[str, str]:
        """delta-rs `storage_options` (only what is set: the rest is its standard chain).
        >>> StorageOptions(endpoint="http://127.0.0.1:1", region="r").delta_rs()["AWS_ALLOW_HTTP"]
        'true'
        """
        opts = {}
        if self.endpoint:
            opts["AWS_ENDPOINT_URL"] = self.endpoint
        if self.region:
            opts["AWS_REGION"] = self.region
        if self.has_keys:
            opts["AWS_ACCESS_KEY_ID"] = self.access_key_id
            opts["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key
        if self.session_token:
            opts["AWS_SESSION_TOKEN"] = self.session_token
        if self.allow_http:
            opts["AWS_ALLOW_HTTP"] = "true"
        if self.endpoint or self.path_style is not None:
            opts["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false" if self.effective_path_style else "true"
        return opts

    def environment(self) -> dict[str, str]:
        """The standard AWS variables for a child process (its environment is readable by its
        owner only, unlike its command line)."""
        env = {}
        if self.endpoint:
            env["AWS_ENDPOINT_URL"] = self.endpoint
        if self.region:
            env["AWS_REGION"] = self.region
        if self.has_keys:
            env["AWS_ACCESS_KEY_ID"] = self.access_key_id
            env["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key
        if self.session_token:
            env["AWS_SESSION_TOKEN"] = self.session_token
        if self.allow_http:
            env["AWS_ALLOW_HTTP"] = "true"
        return env


@dataclass(frozen=True)
class Entry:
    location: str
    is_dir: bool
    size: int
    mtime: float   # seconds since the epoch (0 when the store does not say)

    @property
    def name(self) -> str:
        return self.location.rstrip("/").rsplit("/", 1)[-1]


class Storage:
    """Files under canonical locations of one kind of store: a local disk (os), or S3 with one
    configuration (boto3: it lists and removes exactly the keys S3 has; pyarrow's filesystem
    writes directory-marker objects of its own when it deletes)."""

    def __new__(cls, root: str, options: StorageOptions = StorageOptions()):
        if cls is Storage:
            scheme = url_scheme(canonical(root))
            cls = LocalStorage if scheme == "" else S3Storage if scheme in OBJECT_STORE_SCHEMES else UnlistedStorage
        return super().__new__(cls)

    def __init__(self, root: str, options: StorageOptions = StorageOptions()):
        self.root = canonical(root)
        self.scheme = url_scheme(self.root)
        self.options = options

    is_local = False
    can_list = False   # can the destination itself list and remove files here (else only the engine can)?
    # Staged Parquet parts are read once; compressing them pays where bytes travel (uploads).
    staging_compression = "snappy"

    @staticmethod
    def parent(location: str) -> str:
        return location.rstrip("/").rsplit("/", 1)[0]

    def list(self, location: str, recursive: bool = False) -> list[Entry]:
        """The entries directly under `location` (all files below it when `recursive`); a missing
        location is empty."""
        raise NotImplementedError

    def exists(self, location: str) -> bool:
        raise NotImplementedError

    def read_bytes(self, location: str) -> bytes:
        raise NotImplementedError

    def write_bytes(self, location: str, data: bytes) -> None:
        raise NotImplementedError

    def make_dirs(self, location: str) -> None:
        """A directory and its parents (object stores have no directories: nothing)."""

    def make_private_dir(self, location: str) -> None:
        """A directory only this user can read (object stores have no directories: nothing)."""

    def delete_file(self, location: str) -> None:
        raise NotImplementedError

    def delete_tree(self, location: str) -> None:
        """Everything under `location`, quietly (a missing location is fine)."""
        raise NotImplementedError

    def rename_dir(self, src: str, dst: str) -> None:
        """An atomic directory rename (local disks only: object stores have none)."""
        raise ValueError(f"{self.scheme or 'this'} storage cannot rename directories")

    def write_parquet_parts(self, location: str, parts: Iterable[pa.Table]) -> None:
        """Staged batch parts, one Parquet file each, in a private folder (timestamps in
        microseconds, as the engines and delta-rs read them). Parts are encoded and written on
        a few threads at once: pyarrow's Parquet writer is single-threaded per file and
        releases the GIL, and on an object store each part is its own upload."""
        import io
        import itertools
        from concurrent.futures import ThreadPoolExecutor

        import pyarrow.parquet as pq

        self.make_private_dir(location)

        def write(i: int, part: pa.Table) -> None:
            buf = io.BytesIO()
            pq.write_table(part, buf, coerce_timestamps="us", allow_truncated_timestamps=False,
                           compression=self.staging_compression)
            self.write_bytes(f"{location.rstrip('/')}/part-{i:05d}.parquet", buf.getvalue())

        with ThreadPoolExecutor(max_workers=PARQUET_PART_WRITERS, thread_name_prefix="stage-parquet") as pool:
            list(pool.map(write, itertools.count(), parts))   # list(): the first error is raised

    def delete_table_files(self, location: str) -> None:
        """A table's files, its log last: while the data files go, the log still says what the
        table is (after a drop's empty commit: no rows)."""
        log_dir = f"{location.rstrip('/')}/_delta_log"
        for entry in self.list(location):
            if entry.location.rstrip("/") == log_dir:
                continue
            if entry.is_dir:
                self.delete_tree(entry.location)
            else:
                self.delete_file(entry.location)
        self.delete_tree(location)


class LocalStorage(Storage):
    # on a local disk (the page cache, mostly) uncompressed parts are written 20% faster and read as fast
    staging_compression = "none"
    is_local = True
    can_list = True

    def list(self, location: str, recursive: bool = False) -> list[Entry]:
        out = []
        if recursive:
            for dirpath, dirnames, filenames in os.walk(location):
                for n in filenames:
                    out.append(self._entry(os.path.join(dirpath, n)))
            return [e for e in out if e is not None]
        try:
            names = os.listdir(location)
        except OSError:
            return []
        return [e for e in (self._entry(os.path.join(location, n)) for n in names) if e is not None]

    @staticmethod
    def _entry(path: str) -> Optional[Entry]:
        try:
            st = os.stat(path)
        except OSError:   # removed meanwhile
            return None
        import stat

        return Entry(path, stat.S_ISDIR(st.st_mode), st.st_size, st.st_mtime)

    def exists(self, location: str) -> bool:
        return os.path.lexists(location)

    def read_bytes(self, location: str) -> bytes:
        with open(location, "rb") as f:
            return f.read()

    def write_bytes(self, location: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(location), exist_ok=True)
        with open(location, "wb") as f:
            f.write(data)

    def make_dirs(self, location: str) -> None:
        os.makedirs(location, exist_ok=True)

    def make_private_dir(self, location: str) -> None:
        os.makedirs(location, mode=0o700)

    def delete_file(self, location: str) -> None:
        try:
            os.remove(location)
        except FileNotFoundError:
            pass

    def delete_tree(self, location: str) -> None:
        import shutil

        if os.path.isdir(location) and not os.path.islink(location):
            shutil.rmtree(location, ignore_errors=True)
        else:
            self.delete_file(location)

    def rename_dir(self, src: str, dst: str) -> None:
        os.rename(src, dst)


_CLIENTS: dict[str, object] = {}
_CLIENTS_LOCK = threading.Lock()


def s3_client(options: StorageOptions):
    """One boto3 client per configuration (thread-safe; kept for the process's life)."""
    key = options.identity()
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            import boto3
            from botocore.config import Config

            kwargs: dict = {"config": Config(s3={"addressing_style": "path" if options.effective_path_style else "auto"},
                                              retries={"max_attempts": 5, "mode": "standard"})}
            if options.endpoint:
                kwargs["endpoint_url"] = options.endpoint
            if options.region:
                kwargs["region_name"] = options.region
            elif options.endpoint and not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
                kwargs["region_name"] = "us-east-1"   # S3-compatible stores rarely care; the SDK insists
            if options.has_keys:
                kwargs.update(aws_access_key_id=options.access_key_id, aws_secret_access_key=options.secret_access_key)
                if options.session_token:
                    kwargs["aws_session_token"] = options.session_token
            client = boto3.session.Session().client("s3", **kwargs)
            _CLIENTS[key] = client
        return client


class S3Storage(Storage):
    is_local = False
    can_list = True

    @property
    def client(self):
        return s3_client(self.options)

    @staticmethod
    def _split(location: str) -> tuple[str, str]:
        rest = canonical(location).split("://", 1)[1]
        bucket, _, key = rest.partition("/")
        return bucket, key

    def _location(self, bucket: str, key: str) -> str:
        return f"{self.scheme}://{bucket}/{key}".rstrip("/")

    def list(self, location: str, recursive: bool = False) -> list[Entry]:
        bucket, key = self._split(location)
        prefix = key.rstrip("/") + "/" if key else ""
        kwargs = {"Bucket": bucket, "Prefix": prefix}
        if not recursive:
            kwargs["Delimiter"] = "/"
        out = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
                for cp in page.get("CommonPrefixes", ()):
                    out.append(Entry(self._location(bucket, cp["Prefix"]), True, 0, 0.0))
                for obj in page.get("Contents", ()):
                    if obj["Key"] == prefix:   # a directory marker some tools write
                        continue
                    out.append(Entry(self._location(bucket, obj["Key"]), False, obj.get("Size", 0),
                                     obj["LastModified"].timestamp()))
        except self.client.exceptions.NoSuchBucket:
            return []
        return out

    def exists(self, location: str) -> bool:
        bucket, key = self._split(location)
        page = self.client.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
        return any(o["Key"] == key or o["Key"].startswith(key.rstrip("/") + "/") for o in page.get("Contents", ()))

    def read_bytes(self, location: str) -> bytes:
        bucket, key = self._split(location)
        try:
            return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey as exc:
            raise FileNotFoundError(location) from exc

    def write_bytes(self, location: str, data: bytes) -> None:
        bucket, key = self._split(location)
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def delete_file(self, location: str) -> None:
        bucket, key = self._split(location)
        self.client.delete_object(Bucket=bucket, Key=key)

    def delete_tree(self, location: str) -> None:
        """Every object under `location`, then every folder entry on the way to them, deepest
        first. Stores with real folders (SeaweedFS's filer) keep an emptied folder and list it
        as a common prefix; Delta on Spark then finds `<table>/_delta_log` and takes a dropped
        table for an existing one. Deleting a folder key is a no-op on AWS S3."""
        bucket, key = self._split(location)
        prefix = key.rstrip("/") + "/" if key else ""
        keys: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys.extend(o["Key"] for o in page.get("Contents", ()))
        folders = {prefix} if prefix else set()
        for k in keys:
            parts = k[len(prefix):].split("/")[:-1]
            for i in range(1, len(parts) + 1):
                folders.add(prefix + "/".join(parts[:i]) + "/")
        objects = [k for k in keys if k not in folders]
        if key:
            objects.append(key.rstrip("/"))   # the location itself, when it is an object
        self._delete_keys(bucket, objects)
        self._delete_keys(bucket, sorted(folders, key=lambda f: (-f.count("/"), f)))

    def _delete_keys(self, bucket: str, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            self.client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]],
                                                              "Quiet": True})


class UnlistedStorage(Storage):
    """Stores only the engine reaches (gs://, abfss://, hdfs:// ... as the Spark engine sees them)."""
