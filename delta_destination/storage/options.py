"""Every store's settings in one value (what `Settings.storage` and `Warehouse.options` hold).
S3's fields stay flat on it (the name and spelling its callers have always used); each other
store's settings are a field of their own type from the store's module."""
from __future__ import annotations

import hashlib
from dataclasses import astuple, dataclass, field

from .azure import AzureOptions
from .gcs import GcsOptions
from .s3 import S3Options


@dataclass(frozen=True)
class StorageOptions(S3Options):
    azure: AzureOptions = field(default_factory=AzureOptions)
    gcs: GcsOptions = field(default_factory=GcsOptions)

    def identity(self) -> str:
        """A stable, non-reversible name of these options (caches key on it; never the secret).
        >>> StorageOptions(secret_access_key="x").identity() != StorageOptions(secret_access_key="y").identity()
        True
        """
        return hashlib.sha256(repr(astuple(self)).encode("utf-8")).hexdigest()[:16]
