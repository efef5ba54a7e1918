"""A real Azure Storage (Blob) server on loopback for the tests and manual runs: Azurite from npm
(`make azurite` installs the pinned version into .azurite/; Node.js 18+).

What a start guarantees (checked by tests/engines/test_azure_storage.py):
- It listens on 127.0.0.1 only, on a port picked free at start, with its data in a temporary
  directory private to this user, removed by `stop()`.
- Its account is random per start (name and key, given in Azurite's AZURITE_ACCOUNTS variable, never on
  its command line), so a test can look for the key in logs and errors.
- The container exists before `start()` returns.
- The server dies with the thread that started it (delta_destination/engines/launcher.py).

Azurite serves the Blob API, not ADLS Gen2's DFS endpoint: every client here reaches it through
Blob (object_store's emulator mode for Sail and delta-rs, pyarrow's AzureFileSystem for the
destination's own files and the tests' listings).
"""
from __future__ import annotations

import base64
import os
import secrets
import time
from pathlib import Path
from typing import Optional

from tools.emulator import EmulatorProcess, free_port

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONTAINER = "warehouse"


class AzureServerError(RuntimeError):
    """Azurite is missing, did not start, or did not answer in time."""


def azurite_binary() -> Path:
    """Azurite's Blob server as `make azurite` installs it (or $AZURITE_BLOB_BINARY)."""
    path = Path(os.environ.get("AZURITE_BLOB_BINARY") or ROOT / ".azurite" / "node_modules" / ".bin" / "azurite-blob")
    if not path.exists():
        raise AzureServerError(f"Azurite is not installed at {path}: run `make azurite` (needs Node.js and npm)")
    return path


class AzureServer(EmulatorProcess):
    """Azurite's Blob service with one account and container, on loopback.

    with AzureServer() as az:
        az.url("wh")      -> "abfss://warehouse@<account>.dfs.core.windows.net/wh"
        az.settings()     -> the destination's azure_* settings
        az.list_keys("wh/")
    """

    title = "azurite"
    log_name = "azurite.log"
    error = AzureServerError

    def __init__(self, container: str = DEFAULT_CONTAINER, *, startup_timeout: float = 60.0, stop_grace: float = 3.0):
        super().__init__(startup_timeout=startup_timeout, stop_grace=stop_grace)
        self.container = container
        self.account = ""
        self.account_key = ""
        self.endpoint_url = ""
        self._fs = None

    def start(self) -> "AzureServer":
        if self._proc is not None:
            raise AzureServerError("already started")
        binary = azurite_binary()
        self._private_dir("azurite-")
        self.account = "acct" + secrets.token_hex(6)
        self.account_key = base64.b64encode(secrets.token_bytes(64)).decode("ascii")
        port = free_port()
        self.endpoint_url = f"http://127.0.0.1:{port}"
        cmd = [str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(self.data_dir / "db"),
               "--loose", "--skipApiVersionCheck", "--disableProductStyleUrl", "--disableTelemetry"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "AZURITE_"))}
        env["AZURITE_ACCOUNTS"] = f"{self.account}:{self.account_key}"
        self._spawn(cmd, env)
        try:
            self._wait_until(lambda: self.filesystem().create_dir(self.container), "create its container", (OSError,))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        super().stop()
        self._fs = None

    # ---- what clients need --------------------------------------------------------------

    def url(self, prefix: str = "", container: Optional[str] = None) -> str:
        return f"abfss://{container or self.container}@{self.account}.dfs.core.windows.net/{prefix.lstrip('/')}"

    def env(self) -> dict[str, str]:
        """object_store's standard variables for the emulator (Sail, delta-rs; the destination's settings)."""
        return {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": self.endpoint_url,
                "AZURE_STORAGE_ACCOUNT_NAME": self.account, "AZURE_STORAGE_ACCOUNT_KEY": self.account_key}

    def settings(self) -> dict[str, str]:
        """The destination's azure_* settings for this server."""
        return {"azure_use_emulator": "true", "azure_emulator_url": self.endpoint_url,
                "azure_account_name": self.account, "azure_account_key": self.account_key}

    def storage_options(self) -> dict[str, str]:
        """delta-rs `storage_options` (object_store reads the emulator's URL from the environment
        only, so it is given as the account's endpoint)."""
        return {"azure_storage_account_name": self.account, "azure_storage_account_key": self.account_key,
                "azure_storage_endpoint": f"{self.endpoint_url}/{self.account}", "azure_allow_http": "true"}

    def filesystem(self):
        if self._fs is None:
            from pyarrow import fs

            host = self.endpoint_url.split("://", 1)[1]
            self._fs = fs.AzureFileSystem(account_name=self.account, account_key=self.account_key,
                                          blob_storage_authority=host, dfs_storage_authority=host,
                                          blob_storage_scheme="http", dfs_storage_scheme="http")
        return self._fs

    def list_keys(self, prefix: str = "", container: Optional[str] = None) -> list[str]:
        """Every blob name under `prefix` in the container (sorted)."""
        from pyarrow import fs

        base = f"{container or self.container}/{prefix}".rstrip("/")
        infos = self.filesystem().get_file_info(fs.FileSelector(base, allow_not_found=True, recursive=True))
        skip = len(container or self.container) + 1
        return sorted(i.path[skip:] for i in infos if i.type == fs.FileType.File)

    def list_blobs(self, prefix: str = "", container: Optional[str] = None) -> list[str]:
        """Every blob name under `prefix` exactly as stored, from the Blob API's flat List Blobs
        (signed with the account's SharedKey): folder marker blobs included, which pyarrow folds
        into folders (Hadoop ABFS's `name`, pyarrow's own `name/`). Sorted."""
        import hashlib
        import hmac
        import urllib.parse
        import urllib.request
        import xml.etree.ElementTree as ET
        from email.utils import formatdate

        container = container or self.container
        names: list[str] = []
        marker = ""
        while True:
            query = {"comp": "list", "restype": "container", **({"prefix": prefix} if prefix else {}),
                     **({"marker": marker} if marker else {})}
            headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
            signed = "GET\n" + "\n" * 11 + "".join(f"{k}:{v}\n" for k, v in sorted(headers.items())) + \
                f"/{self.account}/{self.account}/{container}" + "".join(f"\n{k}:{v}" for k, v in sorted(query.items()))
            digest = hmac.new(base64.b64decode(self.account_key), signed.encode("utf-8"), hashlib.sha256).digest()
            headers["Authorization"] = f"SharedKey {self.account}:{base64.b64encode(digest).decode('ascii')}"
            url = f"{self.endpoint_url}/{self.account}/{container}?{urllib.parse.urlencode(query)}"
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as answer:
                root = ET.fromstring(answer.read())
            names.extend(b.findtext("Name") for b in root.iter("Blob"))
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return sorted(names)

    def put_folder_marker(self, name: str, container: Optional[str] = None) -> None:
        """The empty blob Hadoop ABFS writes for a folder it makes on a flat namespace (`hdi_isfolder`)."""
        with self.filesystem().open_output_stream(f"{container or self.container}/{name}",
                                                  metadata={"hdi_isfolder": "true"}) as f:
            f.write(b"")


def main() -> int:
    """Serve Azurite until interrupted, printing the variables a client needs."""
    with AzureServer() as az:
        for key, value in az.env().items():
            print(f"{key}={value}")
        print(f"# warehouse: {az.url('wh')}", flush=True)
        try:
            while az.alive():
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
