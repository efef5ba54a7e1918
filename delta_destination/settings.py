"""Settings shared by every door: where tables live and which engine writes them.

Doors build them from their own inputs (command-line flags, a Fivetran request's
configuration map, an Airbyte config file, Conduit connector settings).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Optional

from .core.errors import InvalidRequest
from .warehouse import normalise_root

ENGINES = ("sail", "spark")
WAREHOUSE_KEY = "warehouse_path"
SPARK_REMOTE_KEY = "spark_remote"
ENGINE_KEY = "engine"


@dataclass(frozen=True)
class Settings:
    warehouse: str
    engine: str = "sail"                 # the SQL dialect: embedded/remote Sail, or Apache Spark + Delta
    spark_remote: Optional[str] = None   # None = an engine this process starts itself

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise InvalidRequest(f"engine must be one of {', '.join(ENGINES)}")
        if self.spark_remote and not self.spark_remote.startswith("sc://"):
            raise InvalidRequest("spark_remote must be a Spark Connect URL like sc://host:15002")

    @staticmethod
    def create(warehouse: str, engine: Optional[str] = None, spark_remote: Optional[str] = None) -> "Settings":
        remote = (spark_remote or "").strip() or None
        # A remote endpoint is Apache Spark unless told otherwise.
        chosen = (engine or "").strip().lower() or ("spark" if remote else "sail")
        return Settings(warehouse=normalise_root(warehouse), engine=chosen, spark_remote=remote)

    def resolve(self, configuration: Mapping[str, str]) -> "Settings":
        """Apply a request's configuration map; empty values mean 'use the server default'."""
        warehouse = (configuration.get(WAREHOUSE_KEY) or "").strip()
        remote = (configuration.get(SPARK_REMOTE_KEY) or "").strip()
        engine = (configuration.get(ENGINE_KEY) or "").strip().lower()
        if not (warehouse or remote or engine):
            return self
        if remote and not engine:
            engine = "spark" if self.engine == "sail" and not self.spark_remote else self.engine
        return replace(
            self,
            warehouse=normalise_root(warehouse) if warehouse else self.warehouse,
            engine=engine or self.engine,
            spark_remote=remote or self.spark_remote,
        )

    @property
    def engine_label(self) -> str:
        where = f"remote {self.spark_remote}" if self.spark_remote else ("embedded" if self.engine == "sail" else "local")
        return f"{'Sail' if self.engine == 'sail' else 'Apache Spark'} ({where})"
