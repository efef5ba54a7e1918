"""Settings shared by every door: where tables live and which engine writes them.

Doors build them from their own inputs (command-line flags, a Fivetran request's
configuration map, an Airbyte config file, Conduit connector settings).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Mapping, Optional

from .core.errors import InvalidRequest
from .warehouse import normalise_root

ENGINES = ("sail", "spark")
WAREHOUSE_KEY = "warehouse_path"
SPARK_REMOTE_KEY = "spark_remote"
ENGINE_KEY = "engine"
MEMORY_BUDGET_KEY = "memory_budget_gb"
MEMORY_BUDGET_ENV = "DELTA_DESTINATION_MEMORY_BUDGET_GB"
DEFAULT_MEMORY_BUDGET_GB = 4.0   # or half the machine's RAM when that is less (docs/sail-merge-memory.md)


@dataclass(frozen=True)
class Settings:
    warehouse: str
    engine: str = "sail"                 # the SQL dialect: embedded/remote Sail, or Apache Spark + Delta
    spark_remote: Optional[str] = None   # None = an engine this process starts itself
    memory_budget_gb: Optional[float] = None  # None = $DELTA_DESTINATION_MEMORY_BUDGET_GB or the default

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise InvalidRequest(f"engine must be one of {', '.join(ENGINES)}")
        if self.spark_remote and not self.spark_remote.startswith("sc://"):
            raise InvalidRequest("spark_remote must be a Spark Connect URL like sc://host:15002")
        if self.memory_budget_gb is not None and not self.memory_budget_gb > 0:
            raise InvalidRequest(f"{MEMORY_BUDGET_KEY} must be a positive number of GB")

    @staticmethod
    def create(warehouse: str, engine: Optional[str] = None, spark_remote: Optional[str] = None,
               memory_budget_gb: Optional[float] = None) -> "Settings":
        remote = (spark_remote or "").strip() or None
        # A remote endpoint is Apache Spark unless told otherwise.
        chosen = (engine or "").strip().lower() or ("spark" if remote else "sail")
        return Settings(warehouse=normalise_root(warehouse), engine=chosen, spark_remote=remote,
                        memory_budget_gb=memory_budget_gb)

    @property
    def memory_budget_bytes(self) -> int:
        """What an engine that runs in this process may use for one statement: the setting,
        else the environment variable, else 4 GB or half the machine's RAM, whichever is less."""
        gb = self.memory_budget_gb
        if gb is None:
            gb = parse_budget(os.environ.get(MEMORY_BUDGET_ENV, ""))
        if gb is not None:
            return int(gb * 2**30)
        return min(int(DEFAULT_MEMORY_BUDGET_GB * 2**30), physical_memory() // 2)

    def resolve(self, configuration: Mapping[str, str]) -> "Settings":
        """Apply a request's configuration map; empty values mean 'use the server default'."""
        warehouse = (configuration.get(WAREHOUSE_KEY) or "").strip()
        remote = (configuration.get(SPARK_REMOTE_KEY) or "").strip()
        engine = (configuration.get(ENGINE_KEY) or "").strip().lower()
        budget = parse_budget(configuration.get(MEMORY_BUDGET_KEY) or "")
        if not (warehouse or remote or engine or budget):
            return self
        if remote and not engine:
            engine = "spark" if self.engine == "sail" and not self.spark_remote else self.engine
        return replace(
            self,
            warehouse=normalise_root(warehouse) if warehouse else self.warehouse,
            engine=engine or self.engine,
            spark_remote=remote or self.spark_remote,
            memory_budget_gb=budget or self.memory_budget_gb,
        )

    @property
    def engine_label(self) -> str:
        where = f"remote {self.spark_remote}" if self.spark_remote else ("embedded" if self.engine == "sail" else "local")
        return f"{'Sail' if self.engine == 'sail' else 'Apache Spark'} ({where})"


def parse_budget(text: str) -> Optional[float]:
    """A memory budget in GB ("" = not set).
    >>> parse_budget(" 2.5 ")
    2.5
    """
    text = text.strip()
    if not text:
        return None
    try:
        gb = float(text)
    except ValueError:
        raise InvalidRequest(f"{MEMORY_BUDGET_KEY} must be a number of GB") from None
    if not gb > 0 or gb == float("inf"):
        raise InvalidRequest(f"{MEMORY_BUDGET_KEY} must be a positive number of GB")
    return gb


def physical_memory() -> int:
    """The machine's RAM in bytes (Linux/macOS)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
