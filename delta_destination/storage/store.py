"""One kind of store, as every part of the destination needs to know it: the interface each
store's module implements once (local.py, s3.py, azure.py, gcs.py), chosen by a warehouse URL's scheme in
the table of stores.py.

Every conversion of a store's settings lives with the store: delta-rs `storage_options` (the
destination's own log reads, key ranges, the tests), the environment of an embedded Sail process
(Sail reads object_store's variables, AWS_*, AZURE_* or GOOGLE_*, from its environment only), the Hadoop
settings of a Spark session, and the spelling of a location for Spark. Methods take the whole
`StorageOptions` and read their own part of it.
"""
from __future__ import annotations

from typing import Mapping

from .files import Storage


class Store:
    name = "?"
    schemes: tuple[str, ...] = ()           # the schemes it serves, its canonical one first
    aliases: Mapping[str, str] = {}         # other spellings of a scheme -> the canonical one
    storage_class: type[Storage] = Storage  # its client for the destination's own files
    variables: tuple[str, ...] = ()         # the environment variables its clients read
    embedded_reaches = True                 # can embedded Sail write tables there?
    local_spark_wired = True                # has the local Spark engine its connector and settings?
    embedded_refusal = ""                   # why embedded Sail refuses the store ('' = it does not)
    local_spark_jar = ""                    # the connector jar (name prefix) the local engine needs in .spark-jars

    def canonical(self, location: str) -> str:
        """One spelling per place (no trailing slash, the canonical scheme)."""
        scheme, rest = location.split("://", 1)
        scheme = scheme.lower()
        return f"{self.aliases.get(scheme, scheme)}://{rest.rstrip('/')}"

    def delta_rs_options(self, options) -> dict[str, str]:
        """delta-rs `storage_options` for these settings (only what is set)."""
        return {}

    def served_by_environment(self, options, environ: Mapping[str, str]) -> bool:
        """Does a process with this environment reach the store with these settings?"""
        return True

    def environment_defaults(self, environ: Mapping[str, str]) -> dict[str, str]:
        """Variables a Sail process needs beside an environment that serves the settings."""
        return {}

    def sail_environment(self, options) -> dict[str, str]:
        """Its variables for a Sail process whose environment does not serve the settings
        (the child's environment is readable by its owner only, unlike a command line)."""
        return {}

    def hadoop_conf(self, root: str, options) -> dict[str, str]:
        """Spark session settings (Hadoop's) that reach the warehouse at `root`."""
        return {}

    def object_store_path(self, location: str) -> str:
        """A canonical location as object_store (embedded Sail, delta-rs) spells it."""
        return location

    def spark_path(self, location: str, options=None) -> str:
        """A canonical location as the Apache Spark engine (Hadoop) spells it (`options`: the
        settings the location is reached with, where the spelling depends on them)."""
        return location

    def spark_filesystem(self, location: str, options) -> str:
        """What Hadoop caches one client of per JVM for this location, with the settings it was
        first opened with (a bucket, a container); "" when nothing is cached per place."""
        return ""


class UnlistedStorage(Storage):
    """Stores only the engine reaches (gs://, hdfs://, dbfs:/ ... as the Spark engine sees them)."""


class UnlistedStore(Store):
    """A URL no module here serves: handed to the Apache Spark engine as it is."""

    name = "unlisted"
    storage_class = UnlistedStorage
    embedded_reaches = False

    def canonical(self, location: str) -> str:
        if "://" not in location:
            return location.rstrip("/")           # scheme:/path (dbfs:/...): no authority
        return super().canonical(location)


UNLISTED = UnlistedStore()
