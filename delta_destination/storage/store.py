"""One kind of store, as every part of the destination needs to know it: the interface each
store's module implements once (local.py, s3.py, azure.py, gcs.py), chosen by a warehouse URL's scheme in
the table of stores.py.

Every conversion of a store's settings lives with the store: delta-rs `storage_options` (the
destination's own log reads, key ranges, the tests), the environment of an embedded Sail process
(Sail reads object_store's variables, AWS_*, AZURE_* or GOOGLE_*, from its environment only), the Hadoop
settings of a Spark session, and the spelling of a location for Spark. So does everything else
that differs between stores: its settings (`fields`, declared in its module and gathered by
settings.FIELDS; keys `<name>_<attribute of its options>`), their checks, the delta-rs options a
commit needs to be safe there, and Delta's log store for the Spark engine. Methods take the whole
`StorageOptions` (stores.py: one options value per store, by the store's name) and read their own
part of it.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Optional

from ..fields import BOOL, Field
from .files import Storage


class Store:
    name = "?"                              # also its settings' key prefix and its part of StorageOptions
    fields: tuple[Field, ...] = ()          # its settings, in settings.FIELDS (keys `<name>_<attribute>`)
    options_type: Optional[type] = None     # the frozen dataclass its settings make (None: it has none)
    place_noun = "bucket"                   # what `spark_filesystem` names, in messages
    schemes: tuple[str, ...] = ()           # the schemes it serves, its canonical one first
    aliases: Mapping[str, str] = {}         # other spellings of a scheme -> the canonical one
    storage_class: type[Storage] = Storage  # its client for the destination's own files
    variables: tuple[str, ...] = ()         # the environment variables its clients read
    embedded_reaches = True                 # can embedded Sail write tables there?
    local_spark_wired = True                # has the local Spark engine its connector and settings?
    embedded_refusal = ""                   # why embedded Sail refuses the store ('' = it does not)
    local_spark_jar = ""                    # the connector jar (name prefix) the local engine needs in .spark-jars

    def options_from_values(self, values: Mapping[str, Any], base: Any) -> Any:
        """Its settings given in `values` (by key) over `base`: each field parsed by its declaration.
        A tri-state flag given as `auto` (or empty) goes back to automatic (None); any other flag
        so given keeps its value."""
        if not self.fields:
            return base
        unset = self.options_type()
        changes = {}
        for f in self.fields:
            if f.key not in values:
                continue
            attribute, value = f.key[len(self.name) + 1:], f.parse(values[f.key])
            if f.kind == BOOL and value is None and getattr(unset, attribute) is not None:
                continue
            changes[attribute] = value
        return replace(base, **changes) if changes else base

    def check(self, options) -> None:
        """Refuse settings that cannot work (InvalidRequest, naming the key, never a secret)."""

    def commit_options(self) -> dict[str, str]:
        """delta-rs `storage_options` the destination adds when it writes a commit itself
        (compaction): what makes concurrent commits safe on this store."""
        return {}

    def spark_log_store_conf(self, jars_dir: Path) -> dict[str, str]:
        """Spark settings of Delta's log store for this store's paths (`jars_dir`: the local
        engine's jars, where a store's own log store is installed); {}: Delta's default."""
        return {}

    def canonical(self, location: str) -> str:
        """One spelling per place (no trailing slash, the canonical scheme)."""
        scheme, rest = location.split("://", 1)
        scheme = scheme.lower()
        return f"{self.aliases.get(scheme, scheme)}://{rest.rstrip('/')}"

    def delta_rs_options(self, options) -> dict[str, str]:
        """delta-rs `storage_options` for these settings (only what is set)."""
        return {}

    def create_if_absent_refusal(self, location: str, options) -> str:
        """Why `Storage.create_if_absent` cannot be had for `location` with these settings ('' = it
        can): the Iceberg mirror commits its metadata files with it, and is refused without it."""
        return f"{self.name} storage has no conditional create here"

    def pyarrow_path(self, location: str) -> str:
        """A URL as pyarrow's filesystem for this store takes it: `bucket/key` (the URL after its
        scheme); stores whose authority is not the first path part say otherwise."""
        return location.split("://", 1)[1]

    def iceberg_io_properties(self, location: str, options) -> dict[str, str]:
        """pyiceberg FileIO properties that reach this store with these settings (PyArrowFileIO's
        `s3.*`, `adls.*`, `gcs.*`): what the Iceberg mirror writes manifests with, and what a pyiceberg
        reader of the metadata is given (docs/iceberg.md). They hold the settings' secrets: never logged."""
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

    def create_if_absent_refusal(self, location: str, options) -> str:
        return (f"the destination has no client of its own for {location.split(':', 1)[0]}: URLs (only the Apache "
                "Spark engine reaches them), so no conditional create of the metadata file")

    def canonical(self, location: str) -> str:
        if "://" not in location:
            return location.rstrip("/")           # scheme:/path (dbfs:/...): no authority
        return super().canonical(location)


UNLISTED = UnlistedStore()
