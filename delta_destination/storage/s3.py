"""AWS S3 and S3-compatible stores (SeaweedFS, MinIO, Ceph, R2): `s3://bucket/prefix` (`s3a://`,
Hadoop's spelling, means the same place; the Spark engine speaks `s3a://` itself). Its settings are
the `s3_*` fields (FIELDS here, gathered by settings.FIELDS) over the standard AWS_* variables; boto3 is the destination's own
client (it lists and removes exactly the keys S3 has; pyarrow's filesystem writes directory-marker
objects of its own when it deletes)."""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from ..errors import InvalidRequest
from ..fields import BOOL, Field
from .files import Entry, Storage
from .store import Store

FIELDS = (
    Field("s3_endpoint", "S3 endpoint URL", "For S3-compatible stores (SeaweedFS, MinIO, Ceph, R2): their URL, "
          "e.g. http://127.0.0.1:8333. Empty: AWS S3.", env="AWS_ENDPOINT_URL"),
    Field("s3_region", "S3 region", "The bucket's region (empty: AWS_REGION, else us-east-1).", env="AWS_REGION"),
    Field("s3_access_key_id", "S3 access key ID", "Empty: the standard AWS credential chain (profile, "
          "instance role).", env="AWS_ACCESS_KEY_ID"),
    Field("s3_secret_access_key", "S3 secret access key", "Secret for the access key ID.", secret=True,
          env="AWS_SECRET_ACCESS_KEY"),
    Field("s3_session_token", "S3 session token", "For temporary credentials.", secret=True,
          env="AWS_SESSION_TOKEN"),
    Field("s3_path_style", "S3 path-style access", "Address the bucket in the URL path (needed by most "
          "S3-compatible stores); empty: automatic (path-style for an endpoint URL, virtual-hosted on AWS).",
          kind=BOOL),
)

# What a Sail process reads of its environment for S3 (object_store's variables and the profile).
AWS_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID",
                 "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ALLOW_HTTP", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
                 "AWS_PROFILE")


@dataclass(frozen=True)
class S3Options:
    """How to reach an S3 bucket (empty = each client's standard chain, AWS_* and profiles)."""

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


_CLIENTS: dict[str, object] = {}
_CLIENTS_LOCK = threading.Lock()


def s3_client(storage_options):
    """One boto3 client per configuration (`storage_options`: a StorageOptions; thread-safe; kept
    for the process's life)."""
    key = storage_options.identity()
    options = storage_options.s3
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
        rest = location.split("://", 1)[1]
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

    def create_if_absent(self, location: str, data: bytes) -> bool:
        """PutObject with `If-None-Match: *` (AWS S3 since 2024, SeaweedFS, MinIO): 412 when the key
        exists. 409 (ConditionalRequestConflict: another conditional write of the key in flight)
        is a lost race too."""
        from botocore.exceptions import ClientError

        bucket, key = self._split(location)
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (409, 412):
                return False
            raise

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


def object_store_variables(options: S3Options) -> dict[str, str]:
    """object_store's AWS settings (only what is set: the rest is its standard chain), as
    delta-rs `storage_options` and as a Sail process's environment alike.
    >>> object_store_variables(S3Options(endpoint="http://127.0.0.1:1", region="r"))["AWS_ALLOW_HTTP"]
    'true'
    """
    opts = {}
    if options.endpoint:
        opts["AWS_ENDPOINT_URL"] = options.endpoint
    if options.region:
        opts["AWS_REGION"] = options.region
    if options.has_keys:
        opts["AWS_ACCESS_KEY_ID"] = options.access_key_id
        opts["AWS_SECRET_ACCESS_KEY"] = options.secret_access_key
    if options.session_token:
        opts["AWS_SESSION_TOKEN"] = options.session_token
    if options.allow_http:
        opts["AWS_ALLOW_HTTP"] = "true"
    if options.endpoint or options.path_style is not None:
        opts["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false" if options.effective_path_style else "true"
    return opts


def environment_options(environ: Mapping[str, str]) -> S3Options:
    """The S3 settings an environment gives."""
    return S3Options(endpoint=environ.get("AWS_ENDPOINT_URL", ""), region=environ.get("AWS_REGION", ""),
                     access_key_id=environ.get("AWS_ACCESS_KEY_ID", ""),
                     secret_access_key=environ.get("AWS_SECRET_ACCESS_KEY", ""),
                     session_token=environ.get("AWS_SESSION_TOKEN", ""))


def s3a_bucket_conf(bucket: str, options: S3Options) -> dict[str, str]:
    """Hadoop S3A's per-bucket settings for `options`.
    >>> conf = s3a_bucket_conf("b", S3Options(endpoint="http://127.0.0.1:8333", region="r"))
    >>> conf["fs.s3a.bucket.b.endpoint"], conf["fs.s3a.bucket.b.path.style.access"]
    ('http://127.0.0.1:8333', 'true')
    """
    p = f"fs.s3a.bucket.{bucket}."
    conf = {}
    if options.endpoint:
        conf[p + "endpoint"] = options.endpoint
        conf[p + "connection.ssl.enabled"] = "false" if options.allow_http else "true"
    if options.region:
        conf[p + "endpoint.region"] = options.region
    if options.endpoint or options.path_style is not None:
        conf[p + "path.style.access"] = "true" if options.effective_path_style else "false"
    if options.has_keys:
        conf[p + "access.key"] = options.access_key_id
        conf[p + "secret.key"] = options.secret_access_key
        if options.session_token:
            conf[p + "session.token"] = options.session_token
            conf[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        else:
            conf[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    return conf


# How delta-rs commits safely on S3: put-if-absent (`If-None-Match`), as Sail's and Spark's S3A commits
# do, asked for explicitly rather than left to delta-rs's defaults (which have changed across versions,
# and rename unsafely when AWS_S3_ALLOW_UNSAFE_RENAME is set).
SAFE_COMMITS = {"aws_conditional_put": "etag"}
# The project's Delta log store for S3 (jvm/src, built into .spark-jars by `make install`):
# commits are put-if-absent, so several writers of one table cannot overwrite each other's commit.
LOG_STORE_JAR = "delta-destination-storage.jar"
LOG_STORE_CLASS = "deltadestination.storage.S3ConditionalPutLogStore"


class S3Store(Store):
    name = "s3"
    fields = FIELDS
    options_type = S3Options
    schemes = ("s3",)
    aliases = {"s3a": "s3", "s3n": "s3"}
    storage_class = S3Storage
    variables = AWS_VARIABLES
    local_spark_jar = "hadoop-aws-"

    def check(self, options) -> None:
        s3 = options.s3
        if s3.endpoint and not s3.endpoint.startswith(("http://", "https://")):
            raise InvalidRequest("s3_endpoint must be an http:// or https:// URL")
        if bool(s3.access_key_id) != bool(s3.secret_access_key):
            raise InvalidRequest("s3_access_key_id and s3_secret_access_key go together: give both or neither")

    def commit_options(self) -> dict[str, str]:
        return dict(SAFE_COMMITS)

    def spark_log_store_conf(self, jars_dir: Path) -> dict[str, str]:
        """The project's put-if-absent log store where it is installed (without it, Delta's default
        for S3 allows one writer per table)."""
        if not (jars_dir / LOG_STORE_JAR).is_file():
            return {}
        return {"spark.delta.logStore.s3a.impl": LOG_STORE_CLASS, "spark.delta.logStore.s3.impl": LOG_STORE_CLASS}

    def delta_rs_options(self, options) -> dict[str, str]:
        return object_store_variables(options.s3)

    def create_if_absent_refusal(self, location: str, options) -> str:
        return ""   # PutObject If-None-Match (tests/engines/test_iceberg_stores.py measures SeaweedFS's)

    def iceberg_io_properties(self, location: str, options) -> dict[str, str]:
        """PyArrowFileIO's S3 properties (pyarrow's S3FileSystem: path-style unless virtual
        addressing is forced)."""
        s3 = options.s3
        props = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
        if s3.endpoint:
            props["s3.endpoint"] = s3.endpoint
        region = s3.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or \
            ("us-east-1" if s3.endpoint else "")
        if region:
            props["s3.region"] = region
        if s3.has_keys:
            props["s3.access-key-id"] = s3.access_key_id
            props["s3.secret-access-key"] = s3.secret_access_key
            if s3.session_token:
                props["s3.session-token"] = s3.session_token
        props["s3.force-virtual-addressing"] = "false" if s3.effective_path_style else "true"
        return props

    def served_by_environment(self, options, environ: Mapping[str, str]) -> bool:
        """Yes when every setting given is what the environment already says (path style follows
        the endpoint)."""
        env, s3 = environment_options(environ), options.s3
        given = {"endpoint": s3.endpoint, "region": s3.region, "access_key_id": s3.access_key_id,
                 "secret_access_key": s3.secret_access_key, "session_token": s3.session_token}
        return all(not v or v == getattr(env, k) for k, v in given.items()) and s3.path_style is not False

    def environment_defaults(self, environ: Mapping[str, str]) -> dict[str, str]:
        # object_store refuses plain HTTP unless told; an http:// endpoint (S3-compatible stores on
        # a private network) in the environment means it is wanted.
        if environ.get("AWS_ENDPOINT_URL", "").startswith("http://") and "AWS_ALLOW_HTTP" not in environ:
            return {"AWS_ALLOW_HTTP": "true"}
        return {}

    def sail_environment(self, options) -> dict[str, str]:
        return object_store_variables(options.s3)

    def hadoop_conf(self, root: str, options) -> dict[str, str]:
        """S3A settings for the warehouse's bucket (per bucket, so that one engine can serve
        buckets with different credentials); empty options leave S3A to its default chain."""
        return s3a_bucket_conf(root.split("://", 1)[1].split("/", 1)[0], options.s3)

    def spark_path(self, location: str, options=None) -> str:
        """Hadoop's S3 client is S3A: `s3://b/k` -> `s3a://b/k`."""
        return "s3a://" + location[len("s3://"):]

    def spark_filesystem(self, location: str, options) -> str:
        """Hadoop caches one S3A client per bucket per JVM."""
        return location.split("://", 1)[1].split("/", 1)[0]


STORE = S3Store()
