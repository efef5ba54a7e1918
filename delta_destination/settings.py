"""The one settings schema: every setting a door, the command line or `maintain` can take.

`FIELDS` lists each setting once -- its key (the same spelling on every surface), type,
default, scope, validation and whether it is a secret (a `Field`, fields.py); a store's settings
are declared in the store's module (storage/s3.py, azure.py, gcs.py) and gathered here from the
table of stores. Everything else is derived from the declarations: the parsing of values
(`from_values`, `runtime_from_values`: each value through its Field's parse), the defaults of
`Settings` and `Runtime` (`default_of`), and the surfaces:
the Fivetran setup form (doors/fivetran/setup_form.py), the Airbyte spec (doors/airbyte/config.py), the
Conduit parameters (doors/conduit/params.py), the command-line flags of the Fivetran server and
of `maintain` (`add_flags`), and the README's configuration table (tests/unit/test_settings.py
checks it). Doors add only their own protocol settings (Airbyte's buffer size, Conduit's
batch size) next to these.

Precedence: a request's configuration (Fivetran) or a door's config > command-line flag >
the field's environment variable > default. Secrets are never flags (they would show in
`ps`): they come from a configuration or the environment, and no log line, error message
or `repr` shows them. Older spellings of keys (`warehouse_path`, `spark.remote`) are read
as aliases.

Storage: a warehouse on object storage is a URL (`s3://bucket/prefix`; `s3a://` is read
the same). Empty storage fields mean the standard AWS chain (environment, profile,
instance role) of each client that reaches the bucket.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional
from urllib.parse import urlsplit

from .errors import InvalidRequest
from .fields import BOOL, CHOICE, CONNECTION, NUMBER, PROCESS, RUNTIME, Field
from .storage import STORES, StorageOptions, store_for
from .warehouse import normalise_root

ENGINES = ("auto", "sail", "spark")
ICEBERG_OFF, ICEBERG_METADATA = "off", "metadata"
ICEBERG_MODES = (ICEBERG_OFF, ICEBERG_METADATA)
# URI schemes of iceberg_catalog_uri (core/iceberg/catalogs.py CATALOG_KINDS has one row for each).
ICEBERG_CATALOG_SCHEMES = ("sqlite", "postgresql", "mysql", "thrift", "http", "https")
DEFAULT_ICEBERG_CATALOG_NAME = "delta_destination"
AUTO = "auto"
# How AlterTable and Migrate change a table's columns (docs/column-changes.md): in the Delta log
# alone where an engine can, upgrading the table's protocol when that needs it, or by rewriting
# the table while keeping its protocol (so delta-rs, pandas and Polars keep reading it).
IN_PLACE, REWRITE = "in_place", "rewrite"
COLUMN_CHANGES = (IN_PLACE, REWRITE)
DEFAULT_MEMORY_BUDGET_GB = 4.0   # or half the machine's RAM when that is less (docs/sail-merge-memory.md)
MEMORY_BUDGET_ENV = "DELTA_DESTINATION_MEMORY_BUDGET_GB"
DELTA_RETENTION_HOURS = 7 * 24   # Delta's delta.deletedFileRetentionDuration: VACUUM's default and minimum
# The embedded engine's memory bound per door when not set (docs/engine-memory.md): a Fivetran server
# or an Airbyte run writes many tables (a fresh engine holds ~3-4 MiB per table it has written), a
# Conduit connector the few tables of one pipeline, beside Conduit itself. A Conduit connector's bound
# is derived from its engine instead (its warm size + DEFAULT_ENGINE_MEMORY_HEADROOM_MB, docs/conduit.md),
# this figure being only its ceiling: a fixed 256 MiB sat below one keyed table's working set and
# replaced the engine every 20 requests.
DEFAULT_ENGINE_MAX_MEMORY_MB = {"fivetran": 1024, "airbyte": 1024, "conduit": 1024}
# How far past its warm size an engine may grow before it is replaced (0: the fixed bound above alone).
DEFAULT_ENGINE_MEMORY_HEADROOM_MB = {"fivetran": 0, "airbyte": 0, "conduit": 256}


def same_metastore(a: str, b: str) -> bool:
    """Do two thrift:// URIs name the same metastore (host case and a default port aside)?
    >>> same_metastore("thrift://HMS:9083", "thrift://hms:9083/"), same_metastore("thrift://a:9083", "thrift://b:9083")
    (True, False)
    """
    def spot(uri: str) -> tuple:
        u = urlsplit(uri)
        return (u.hostname or "").lower(), u.port or 9083
    return spot(a) == spot(b)


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
        raise InvalidRequest("memory_budget_gb must be a number of GB") from None
    if not gb > 0 or gb == float("inf"):
        raise InvalidRequest("memory_budget_gb must be a positive number of GB")
    return gb


def budget_value(value: Any) -> Optional[float]:
    """memory_budget_gb as given by a door: a number (JSON) or a text.
    >>> budget_value(3), budget_value("1.5"), budget_value("")
    (3.0, 1.5, None)
    """
    if value is None:
        return None
    if isinstance(value, bool) or (isinstance(value, (int, float)) and not value > 0):
        raise InvalidRequest("memory_budget_gb must be a positive number of GB")
    return float(value) if isinstance(value, (int, float)) else parse_budget(str(value))


FIELDS: tuple[Field, ...] = (
    Field("warehouse", "Warehouse", "Root of the Delta tables: a directory, or an object-store URL such as "
          "s3://bucket/prefix. Each table lives at <warehouse>/<schema>/<table>.", default="./warehouse",
          aliases=("warehouse_path",), placeholder="s3://lakehouse/fivetran"),
    Field("engine", "Engine", "auto: embedded Sail, and Apache Spark (the spark_remote server, or a local engine "
          "started when needed) for what Sail cannot serve: a MERGE over the memory budget, upkeep, registering "
          "tables in a catalog, a warehouse Sail cannot reach; Sail only where there is neither. sail: embedded Sail only (a process the destination supervises; no JVM). spark: Apache Spark + Delta Lake, a local "
          "child JVM, or the server at spark_remote.", kind=CHOICE, default="auto", choices=ENGINES),
    Field("spark_remote", "Spark Connect URL", "sc://host:port of a Spark Connect + Delta server (a cluster): "
          "with engine auto the Apache Spark of auto's choices, with engine spark (or sail) every request's "
          "engine; empty: the engines run next to the destination.", aliases=("spark.remote",),
          placeholder="sc://spark-connect.internal:15002"),
    Field("memory_budget_gb", "Memory budget (GB)", "Refuse a MERGE the embedded engine is estimated to need more "
          "memory for; with engine auto, such a MERGE runs on Apache Spark instead (default: "
          f"{DEFAULT_MEMORY_BUDGET_GB:g}, or half the RAM when less).", kind=NUMBER, env=MEMORY_BUDGET_ENV, minimum=0,
          parser=budget_value),
    Field("column_changes", "Column changes", "in_place: widened types, renamed and dropped columns change only "
          "the Delta log where an engine can (Apache Spark + Delta; auto hands such a change to it), upgrading a "
          "table's protocol at its first change that needs it (column mapping: reader 3 / writer 7, which delta-rs's "
          "to_pyarrow_table, pandas through it and Polars then refuse, loudly; type widening, which every delta-rs "
          "reader refuses: docs/readers.md). rewrite: keep every table's protocol (changes the "
          "table already allows stay in place); other changes rewrite the table in one commit, which grows with "
          "the table. A table's own delta.enableTypeWidening counts either way.", kind=CHOICE, default=IN_PLACE,
          choices=COLUMN_CHANGES),
    *(f for store in STORES for f in store.fields),   # each store's own (storage/s3.py, azure.py, gcs.py)
    Field("catalog_uri", "Hive Metastore URI", "thrift://host:9083: register every table as an external Delta "
          "table <schema>.<table> in this metastore (Apache Spark engine). Empty: tables are paths only.",
          placeholder="thrift://metastore.internal:9083"),
    Field("iceberg", "Iceberg metadata", "metadata: after every commit, write Apache Iceberg metadata for the table "
          "in its own metadata/ folder (one snapshot per Delta version over the same Parquet files; readers open "
          "<table>/metadata/version-hint.text; docs/iceberg.md); such tables never get deletion vectors. off: Delta "
          "only.", kind=CHOICE, default=ICEBERG_OFF, choices=ICEBERG_MODES),
    Field("iceberg_catalog_uri", "Iceberg catalog URI", "With iceberg metadata: also keep an entry <schema>.<table> "
          "naming each table's newest Iceberg metadata file in this catalog. A SQLAlchemy URL (sqlite:////path/c.db, "
          "postgresql://...) is an Iceberg JDBC/SQL catalog (Iceberg's JdbcCatalog and pyiceberg's SqlCatalog read "
          "it); thrift://host:9083 is a Hive Metastore (Iceberg's HiveCatalog), not the one of catalog_uri; "
          "http(s)://host:8181[/prefix][?warehouse=name] is an Iceberg REST catalog (no credentials). Empty: "
          "readers open the table's metadata folder (docs/iceberg.md).", placeholder="sqlite:////data/iceberg.db",
          secret=True),
    Field("iceberg_catalog_name", "Iceberg catalog name", "The catalog name of the SQL catalog's entries (what "
          "readers name the catalog: Iceberg's JdbcCatalog and pyiceberg only see entries of their own name). Not "
          "used by a REST catalog (its URL's ?warehouse= picks one of a server's catalogs).",
          default=DEFAULT_ICEBERG_CATALOG_NAME),
    # Process settings: how a long-running server looks after its tables (core/upkeep.py).
    Field("upkeep_interval_hours", "Upkeep interval (hours)", "Compact, purge deletion vectors and vacuum idle tables "
          "this often (0 = off; Fivetran's own lake destinations: 168).", kind=NUMBER, default="0", scope=PROCESS,
          minimum=0),
    Field("upkeep_idle_minutes", "Upkeep idle time (minutes)", "Periodic upkeep skips tables written less than this "
          "long ago.", kind=NUMBER, default="10", scope=PROCESS, minimum=0),
    Field("vacuum_retention_hours", "VACUUM retention (hours)", "VACUUM keeps files removed less than this long ago "
          f"(minimum and default: Delta's {DELTA_RETENTION_HOURS}).", kind=NUMBER, default=str(DELTA_RETENTION_HOURS),
          scope=PROCESS, minimum=DELTA_RETENTION_HOURS),
    # Runtime settings: how a door's process runs its engines and shows its state (every door).
    Field("spark_idle_minutes", "Spark idle time (minutes)", "With engine auto: stop the local Apache Spark engine "
          "after this long without work (0 = keep it once started).", kind=NUMBER, default="10", scope=RUNTIME,
          minimum=0),
    Field("engine_max_memory_mb", "Embedded engine memory bound (MiB)", "Replace the embedded Sail engine's process "
          "between requests once its resident memory passes this (never under a running request; 0 = never). Sail "
          "keeps memory for every statement it runs, so this bounds the destination's memory over weeks. Empty: "
          f"{DEFAULT_ENGINE_MAX_MEMORY_MB['fivetran']}. With engine_memory_headroom_mb the bound is the lower of this and the engine's own.",
          kind=NUMBER, env="DELTA_DESTINATION_ENGINE_MAX_MEMORY_MB", scope=RUNTIME, minimum=0),
    Field("engine_memory_headroom_mb", "Embedded engine memory headroom (MiB)", "Derive the embedded engine's bound "
          "from the engine itself: its resident memory once warm (after 20 requests) plus this; a healthy engine "
          "is then replaced about once per 500 requests or less often, and a warning says when it grew faster. "
          f"0 = only engine_max_memory_mb. Empty: {DEFAULT_ENGINE_MEMORY_HEADROOM_MB['fivetran']}, or "
          f"{DEFAULT_ENGINE_MEMORY_HEADROOM_MB['conduit']} in a Conduit connector.", kind=NUMBER,
          env="DELTA_DESTINATION_ENGINE_MEMORY_HEADROOM_MB", scope=RUNTIME, minimum=0),
    Field("engine_max_requests", "Embedded engine requests bound", "Also replace the embedded Sail engine's process "
          "after it served this many requests (0 = no such bound).", kind=NUMBER, default="0", scope=RUNTIME,
          minimum=0, integer=True),
    Field("compact_small_files", "Compact after small files", "Rewrite a table's small files (under 16 MiB) into "
          "bigger ones in the background once it holds this many (a commit that changes no data; tables the "
          "embedded engine created); every commit of a small batch adds one, and the embedded engine's MERGE reads "
          "them all. 0 = never.", kind=NUMBER, default="50", env="DELTA_DESTINATION_COMPACT_SMALL_FILES",
          scope=RUNTIME, minimum=0, integer=True),
    Field("metrics_port", "Metrics port", "Serve Prometheus metrics at /metrics on this port (every interface) or "
          "host:port, e.g. 127.0.0.1:9464; empty: off.", env="DELTA_DESTINATION_METRICS_PORT", scope=RUNTIME,
          placeholder="9464"),
)
BY_KEY = {f.key: f for f in FIELDS}
ALIASES = {a: f.key for f in FIELDS for a in f.aliases}
CONNECTION_FIELDS = tuple(f for f in FIELDS if f.scope == CONNECTION)
RUNTIME_FIELDS = tuple(f for f in FIELDS if f.scope == RUNTIME)
STORE_KEYS = frozenset(f.key for store in STORES for f in store.fields)
# The connection settings that are Settings' own fields (the stores' make Settings.storage).
OWN_FIELDS = tuple(f for f in CONNECTION_FIELDS if f.key not in STORE_KEYS)


def default_of(key: str) -> Any:
    """A setting's default, as its declaration gives it (the one place it is written).
    >>> default_of("spark_idle_minutes"), default_of("compact_small_files"), default_of("engine")
    (10.0, 50, 'auto')
    """
    return BY_KEY[key].default_value


@dataclass(frozen=True)
class Runtime:
    """How a door's process runs (the RUNTIME fields): one per process, unlike Settings, which a
    Fivetran request's configuration may change."""

    spark_idle_minutes: float = default_of("spark_idle_minutes")
    engine_max_memory_mb: Optional[float] = None   # None: the door's default (DEFAULT_ENGINE_MAX_MEMORY_MB)
    engine_memory_headroom_mb: Optional[float] = None   # None: the door's default (DEFAULT_ENGINE_MEMORY_HEADROOM_MB)
    engine_max_requests: int = default_of("engine_max_requests")
    compact_small_files: int = default_of("compact_small_files")
    metrics_port: str = default_of("metrics_port")

    def engine_memory_bound_mb(self, door: str) -> float:
        """
        >>> Runtime().engine_memory_bound_mb("conduit"), Runtime(engine_max_memory_mb=0).engine_memory_bound_mb("x")
        (1024, 0)
        """
        if self.engine_max_memory_mb is not None:
            return self.engine_max_memory_mb
        return DEFAULT_ENGINE_MAX_MEMORY_MB.get(door, DEFAULT_ENGINE_MAX_MEMORY_MB["fivetran"])

    def engine_memory_headroom(self, door: str) -> float:
        """
        >>> Runtime().engine_memory_headroom("conduit"), Runtime().engine_memory_headroom("fivetran")
        (256, 0)
        >>> Runtime(engine_memory_headroom_mb=0).engine_memory_headroom("conduit")
        0
        """
        if self.engine_memory_headroom_mb is not None:
            return self.engine_memory_headroom_mb
        return DEFAULT_ENGINE_MEMORY_HEADROOM_MB.get(door, 0)

    def __post_init__(self):
        if self.metrics_port:
            host, sep, port = self.metrics_port.rpartition(":")
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise InvalidRequest("metrics_port must be a port number or host:port")


def runtime_from_values(values: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> Runtime:
    """The runtime fields of a door's config (over their environment variables and defaults);
    messages name the key."""
    out: dict[str, Any] = {}
    for f in RUNTIME_FIELDS:
        raw = values.get(f.key)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            raw = environ.get(f.env, "") if f.env else ""
        if isinstance(raw, str) and not raw.strip():
            continue   # the Runtime field's default: the declaration's, or None (a door's default)
        out[f.key] = f.parse(raw)
    return Runtime(**out)


@dataclass(frozen=True)
class Settings:
    warehouse: str
    engine: str = default_of("engine")   # auto (chosen per request: engines/choice.py), sail or spark
    spark_remote: Optional[str] = None   # None = an engine this process starts itself
    memory_budget_gb: Optional[float] = None  # None = $DELTA_DESTINATION_MEMORY_BUDGET_GB or the default
    storage: StorageOptions = StorageOptions()
    catalog_uri: Optional[str] = None
    column_changes: str = default_of("column_changes")   # in_place or rewrite (core/tables.py)
    iceberg: str = default_of("iceberg")   # off or metadata (core/iceberg/)
    iceberg_catalog_uri: Optional[str] = None   # where entries name each table's Iceberg metadata (core/iceberg/catalogs.py)
    iceberg_catalog_name: str = default_of("iceberg_catalog_name")

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise InvalidRequest(f"engine must be one of {', '.join(ENGINES)}")
        if self.spark_remote and not self.spark_remote.startswith("sc://"):
            raise InvalidRequest("spark_remote must be a Spark Connect URL like sc://host:15002")
        if self.memory_budget_gb is not None and not self.memory_budget_gb > 0:
            raise InvalidRequest("memory_budget_gb must be a positive number of GB")
        if self.column_changes not in COLUMN_CHANGES:
            raise InvalidRequest(f"column_changes must be one of {', '.join(COLUMN_CHANGES)}")
        if self.catalog_uri and not self.catalog_uri.startswith("thrift://"):
            raise InvalidRequest("catalog_uri must be a Hive Metastore URI like thrift://host:9083")
        if self.catalog_uri and self.engine == "sail":
            raise InvalidRequest("catalog_uri needs the Apache Spark engine to register tables (engine spark, or a "
                                 "Spark Connect server whose catalog is this metastore); Sail cannot register them")
        if self.iceberg not in ICEBERG_MODES:
            raise InvalidRequest(f"iceberg must be one of {', '.join(ICEBERG_MODES)}")
        if self.iceberg_catalog_uri:
            scheme = self.iceberg_catalog_uri.split(":", 1)[0].split("+", 1)[0].lower()
            if scheme not in ICEBERG_CATALOG_SCHEMES or "://" not in self.iceberg_catalog_uri:
                raise InvalidRequest("iceberg_catalog_uri must be a SQLAlchemy URL (sqlite:////path/catalog.db, "
                                     "postgresql://host/db, mysql://host/db), a Hive Metastore URI "
                                     "(thrift://host:9083) or an Iceberg REST catalog URL (http://host:8181)")
            if self.iceberg == ICEBERG_OFF:
                raise InvalidRequest("iceberg_catalog_uri needs iceberg set to metadata: the catalog's entries name "
                                     "the Iceberg metadata the destination writes")
            if self.catalog_uri and scheme == "thrift" and same_metastore(self.catalog_uri, self.iceberg_catalog_uri):
                raise InvalidRequest("iceberg_catalog_uri and catalog_uri name the same Hive Metastore, where one "
                                     "name holds one table: the Delta entry (catalog_uri) or the Iceberg one; use "
                                     "another metastore or a SQL catalog for the Iceberg entries")
        for store in STORES:
            store.check(self.storage)
        if self.iceberg != ICEBERG_OFF:
            # The metadata commit is put-if-absent on every store (core/iceberg/metadata_files.py);
            # where these settings cannot have it, the mirror would be unsafe for two writers.
            why = store_for(self.warehouse).create_if_absent_refusal(self.warehouse, self.storage)
            if why:
                raise InvalidRequest(f"iceberg metadata cannot be committed safely to this warehouse: {why}; "
                                     "or set iceberg to off")

    @staticmethod
    def create(warehouse: str, engine: Optional[str] = None, spark_remote: Optional[str] = None,
               memory_budget_gb: Optional[float] = None, **more: Any) -> "Settings":
        """From named values (flags, tests); empty values mean defaults."""
        values = {"warehouse": warehouse, "engine": engine, "spark_remote": spark_remote,
                  "memory_budget_gb": memory_budget_gb, **more}
        return from_values({k: v for k, v in values.items() if v is not None and v != ""})

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
        """Apply a request's configuration map over these settings; empty values mean 'keep'."""
        given = {k: v for k, v in normalise_keys(configuration).items() if str(v).strip() != ""}
        if not given:
            return self
        return from_values(given, base=self)

    @property
    def spark_remote_shown(self) -> str:
        """The Spark Connect URL as logs and messages may show it (remote_shown)."""
        return remote_shown(self.spark_remote or "")

    @property
    def engine_label(self) -> str:
        if self.engine == AUTO:
            spark = f"the Apache Spark server at {self.spark_remote_shown}" if self.spark_remote else "local Apache Spark"
            return f"auto (embedded Sail; {spark} when Sail cannot serve a request)"
        where = f"remote {self.spark_remote_shown}" if self.spark_remote else ("embedded" if self.engine == "sail" else "local")
        return f"{'Sail' if self.engine == 'sail' else 'Apache Spark'} ({where})"


def remote_shown(url: str) -> str:
    """A Spark Connect URL without its parameters: `;token=...` is a credential, and user ids or
    session settings are not for a log line either. Only the scheme, host and port stay.

    >>> remote_shown("sc://spark.example:15002/;token=abc;user_id=u")
    'sc://spark.example:15002'
    >>> remote_shown("sc:///;token=abc"), remote_shown("sc://h:1")
    ('sc://', 'sc://h:1')
    """
    base = url.split(";", 1)[0].split("?", 1)[0]
    return base[:-1] if base.endswith("/") and len(base) > len("sc://") else base


def normalise_keys(values: Mapping[str, Any]) -> dict[str, Any]:
    """Aliases to their keys (`warehouse_path` -> `warehouse`); the key wins over an alias."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if k in ALIASES and ALIASES[k] not in values:
            out[ALIASES[k]] = v
        elif k not in ALIASES:
            out[k] = v
    return out


def from_values(values: Mapping[str, Any], base: Optional[Settings] = None) -> Settings:
    """Settings from key -> value (only the keys of FIELDS that are connection settings; other
    keys are the door's business), each parsed by its Field; an empty value keeps `base`'s, a
    store's fields go to its part of `storage` (Store.options_from_values). Values are validated;
    messages name the key, never a secret."""
    v = normalise_keys(values)
    base = base or Settings(warehouse=normalise_root(default_of("warehouse")))
    given = {f.key: f.parse(v[f.key]) for f in OWN_FIELDS if f.key in v}
    own = {key: value for key, value in given.items() if value is not None and value != ""}
    if "warehouse" in own:
        own["warehouse"] = normalise_root(own["warehouse"])
    if "engine" not in own:
        # With auto the remote endpoint is the Apache Spark of auto's choices; a Sail-only destination
        # given a remote endpoint uses it as Apache Spark for everything.
        remote = own.get("spark_remote")
        own["engine"] = "spark" if remote and not base.spark_remote and base.engine == "sail" else base.engine
    storage = replace(base.storage, **{store.name: store.options_from_values(v, getattr(base.storage, store.name))
                                       for store in STORES if store.options_type is not None})
    return replace(base, **own, storage=storage)


def from_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The values fields take from their environment variables (for a process's defaults)."""
    return {f.key: environ[f.env] for f in FIELDS if f.env and environ.get(f.env, "").strip()}


def add_flags(parser, scope: str = CONNECTION) -> None:
    """Command-line flags for every non-secret field of the scope (`--warehouse`, `--spark-remote`
    ...; PROCESS adds the long-running server's own). Connection flags default to None so that the
    environment and the schema's defaults apply (from_flags); process flags to their default."""
    for f in FIELDS:
        if f.flag is None or (scope == CONNECTION and f.scope != CONNECTION):
            continue
        default = None if f.scope != PROCESS else f.default_value
        kwargs: dict[str, Any] = {"default": default, "help": f.help + (f" (env {f.env})" if f.env else "")}
        if f.kind == CHOICE:
            kwargs["choices"] = f.choices
        if f.kind == NUMBER:
            kwargs["type"] = float
        parser.add_argument(f.flag, dest=f.key, **kwargs)


def from_flags(args, environ: Mapping[str, str] = os.environ) -> Settings:
    """Settings from parsed flags over the environment over the defaults."""
    values = {**from_environment(environ)}
    values.update({f.key: getattr(args, f.key) for f in FIELDS
                   if f.flag is not None and getattr(args, f.key, None) not in (None, "")})
    return from_values(values)


def physical_memory() -> int:
    """The machine's RAM in bytes (Linux/macOS)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def markdown_table() -> str:
    """The README's settings table (tests/unit/test_settings.py keeps the README equal to it;
    `python -m delta_destination.settings` prints it)."""
    rows = ["| key (every door) | flag | environment | default | meaning |", "|---|---|---|---|---|"]
    for f in FIELDS:
        flag = f"`{f.flag}`" if f.flag else "(none: secret)"
        where = {PROCESS: " (server only)", RUNTIME: " (per process)"}.get(f.scope, "")
        secret = " **Secret**: never logged." if f.secret else ""
        aliases = f" Also read as {', '.join(f'`{a}`' for a in f.aliases)}." if f.aliases else ""
        rows.append(f"| `{f.key}`{where} | {flag} | {f'`{f.env}`' if f.env else ''} | {f'`{f.default}`' if f.default else ''} "
                    f"| {f.help}{secret}{aliases} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())


__all__ = ["FIELDS", "BY_KEY", "Field", "Settings", "StorageOptions", "from_values", "from_flags", "add_flags",
           "ENGINES", "AUTO", "IN_PLACE", "REWRITE", "COLUMN_CHANGES", "ICEBERG_OFF", "ICEBERG_METADATA",
           "parse_budget", "normalise_keys", "default_of",
           "CHOICE", "NUMBER", "BOOL", "CONNECTION", "RUNTIME", "PROCESS"]
