"""The local disk: a warehouse that is a directory (os, atomic directory renames)."""
from __future__ import annotations

import os
from typing import Optional

from .files import Entry, Storage
from .store import Store


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

    def create_if_absent(self, location: str, data: bytes) -> bool:
        """Written in full under a temporary name, then hard-linked to its name: link() fails when
        the name exists, so the file appears whole or not at all."""
        import uuid

        os.makedirs(os.path.dirname(location), exist_ok=True)
        tmp = os.path.join(os.path.dirname(location), f".{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, location)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

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


class LocalStore(Store):
    """A directory: no settings, nothing for any engine to be told."""

    name = "local"
    schemes = ("",)
    storage_class = LocalStorage

    def create_if_absent_refusal(self, location: str, options) -> str:
        return ""


STORE = LocalStore()
