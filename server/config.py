"""Settings: command-line flags, overridable per request by the configuration map."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

from .errors import InvalidRequest

WAREHOUSE_KEY = "warehouse_path"
SPARK_REMOTE_KEY = "spark_remote"


@dataclass(frozen=True)
class Settings:
    warehouse: str
    spark_remote: Optional[str] = None  # None = the embedded Sail engine

    def resolve(self, configuration: Mapping[str, str]) -> "Settings":
        """Apply a request's configuration map; empty values mean 'use the server default'."""
        warehouse = (configuration.get(WAREHOUSE_KEY) or "").strip() or self.warehouse
        remote = (configuration.get(SPARK_REMOTE_KEY) or "").strip() or self.spark_remote
        if remote and not remote.startswith("sc://"):
            raise InvalidRequest("spark_remote must be a Spark Connect URL like sc://host:15002")
        return Settings(warehouse=normalise_warehouse(warehouse), spark_remote=remote)


def normalise_warehouse(path: str) -> str:
    if is_url(path):
        return path.rstrip("/")
    return os.path.abspath(os.path.expanduser(path))


def is_url(path: str) -> bool:
    return "://" in path
