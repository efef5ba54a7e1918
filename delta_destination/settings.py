"""The one settings schema: every setting a door, the command line or `maintain` can take.

`FIELDS` lists each setting once -- its key (the same spelling on every surface), type,
default, validation and whether it is a secret. The surfaces are derived from it:
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

from .errors import InvalidRequest
from .storage import AzureOptions, GcsOptions, StorageOptions
from .warehouse import normalise_root

ENGINES = ("auto", "sail", "spark")
AUTO = "auto"
DEFAULT_MEMORY_BUDGET_GB = 4.0   # or half the machine's RAM when that is less (docs/sail-merge-memory.md)
MEMORY_BUDGET_ENV = "DELTA_DESTINATION_MEMORY_BUDGET_GB"

TEXT, CHOICE, NUMBER, BOOL = "text", "choice", "number", "bool"
# Which surfaces show a field: per-connection settings go everywhere; runtime settings on every
# door's process (the server's command line, an Airbyte config, a Conduit connector's settings;
# not Fivetran's per-connection form); process settings only on the server's command line.
CONNECTION, RUNTIME, PROCESS = "connection", "runtime", "process"
# The embedded engine's memory bound per door when not set (docs/engine-memory.md): a Fivetran server
# or an Airbyte run writes many tables (a fresh engine holds ~3-4 MiB per table it has written), a
# Conduit connector the few tables of one pipeline, beside Conduit itself. A Conduit connector's bound
# is derived from its engine instead (its warm size + DEFAULT_ENGINE_MEMORY_HEADROOM_MB, docs/conduit.md),
# this figure being only its ceiling: a fixed 256 MiB sat below one keyed table's working set and
# replaced the engine every 20 requests.
DEFAULT_ENGINE_MAX_MEMORY_MB = {"fivetran": 1024, "airbyte": 1024, "conduit": 1024}
# How far past its warm size an engine may grow before it is replaced (0: the fixed bound above alone).
DEFAULT_ENGINE_MEMORY_HEADROOM_MB = {"fivetran": 0, "airbyte": 0, "conduit": 256}


@dataclass(frozen=True)
class Field:
    key: str
    label: str
    help: str
    kind: str = TEXT
    default: str = ""
    choices: tuple[str, ...] = ()
    secret: bool = False
    env: str = ""                 # read when the setting is empty
    aliases: tuple[str, ...] = ()  # older spellings accepted on input
    placeholder: str = ""
    scope: str = CONNECTION
    minimum: Optional[float] = None

    @property
    def flag(self) -> Optional[str]:
        """The command-line flag (`--spark-remote`), None for secrets."""
        return None if self.secret else "--" + self.key.replace("_", "-")


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
          "memory for; with engine auto, such a MERGE runs on Apache Spark instead (default: 4, or half the RAM "
          "when less).", kind=NUMBER, env=MEMORY_BUDGET_ENV, minimum=0),
    Field("s3_endpoint", "S3 endpoint URL", "For S3-compatible stores (SeaweedFS, MinIO, Ceph, R2): their URL, "
          "e.g. http://127.0.0.1:8333. Empty: AWS S3.", env="AWS_ENDPOINT_URL"),
    Field("s3_region", "S3 region", "The bucket's region (empty: AWS_REGION, else us-east-1).", env="AWS_REGION"),
    Field("s3_access_key_id", "S3 access key ID", "Empty: the standard AWS credential chain (profile, "
          "instance role).", env="AWS_ACCESS_KEY_ID"),
    Field("s3_secret_access_key", "S3 secret access key", "Secret for the access key ID.", secret=True,
          env="AWS_SECRET_ACCESS_KEY"),
    Field("s3_session_token", "S3 session token", "For temporary credentials.", secret=True,
          env="AWS_SESSION_TOKEN"),
    Field("s3_path_style", "S3 path-style access", "Address the bucket in the URL path (needed by most "
          "S3-compatible stores); empty: automatic (path-style for an endpoint URL, virtual-hosted on AWS).",
          kind=BOOL),
    Field("azure_account_name", "Azure storage account", "The account of an abfss://container@account.dfs.core.windows.net "
          "or az://container warehouse (empty: the one in the URL).", env="AZURE_STORAGE_ACCOUNT_NAME"),
    Field("azure_account_key", "Azure account key", "The storage account's shared key. Empty (and no SAS token or "
          "client secret): Azure's standard credential chain (managed identity, Azure CLI).", secret=True,
          env="AZURE_STORAGE_ACCOUNT_KEY"),
    Field("azure_sas_token", "Azure SAS token", "A shared access signature for the container.", secret=True,
          env="AZURE_STORAGE_SAS_TOKEN"),
    Field("azure_client_id", "Azure client ID", "A service principal's application (client) ID, with "
          "azure_client_secret and azure_tenant_id.", env="AZURE_CLIENT_ID"),
    Field("azure_client_secret", "Azure client secret", "The service principal's secret.", secret=True,
          env="AZURE_CLIENT_SECRET"),
    Field("azure_tenant_id", "Azure tenant ID", "The service principal's tenant (directory) ID.", env="AZURE_TENANT_ID"),
    Field("azure_use_emulator", "Azure storage emulator", "Reach Azurite (its development account unless "
          "azure_account_name is given) instead of Azure.", kind=BOOL, env="AZURE_STORAGE_USE_EMULATOR"),
    Field("azure_emulator_url", "Azurite Blob URL", "Where Azurite's Blob service listens (default "
          "http://127.0.0.1:10000).", env="AZURITE_BLOB_STORAGE_URL"),
    Field("gcs_service_account_key", "GCS service account key", "The JSON key of a Google service account for a "
          "gs://bucket/prefix warehouse (for an emulator it may carry gcs_base_url and disable_oauth, as object_store "
          "reads it). The Apache Spark engine's GCS connector takes keys from files only (gcs_credentials_file): it "
          "refuses a key with a private key. Empty: gcs_credentials_file, else Google's default chain (gcloud's "
          "application default credentials, the metadata server).", secret=True, env="GOOGLE_SERVICE_ACCOUNT_KEY"),
    Field("gcs_credentials_file", "GCS credentials file", "The path of a service account key file, as "
          "GOOGLE_APPLICATION_CREDENTIALS names it (readable by the destination and, for a remote Spark server, "
          "at the same path there).", env="GOOGLE_APPLICATION_CREDENTIALS"),
    Field("gcs_endpoint", "GCS endpoint URL", "A GCS emulator or private endpoint, e.g. http://127.0.0.1:4443 "
          "(without credentials: no OAuth, as Google's clients treat STORAGE_EMULATOR_HOST). Empty: Google Cloud "
          "Storage.", env="STORAGE_EMULATOR_HOST"),
    Field("catalog_uri", "Hive Metastore URI", "thrift://host:9083: register every table as an external Delta "
          "table <schema>.<table> in this metastore (Apache Spark engine). Empty: tables are paths only.",
          placeholder="thrift://metastore.internal:9083"),
    # Process settings: how a long-running server looks after its tables (core/upkeep.py).
    Field("upkeep_interval_hours", "Upkeep interval (hours)", "Compact, purge deletion vectors and vacuum idle tables "
          "this often (0 = off; Fivetran's own lake destinations: 168).", kind=NUMBER, default="0", scope=PROCESS,
          minimum=0),
    Field("upkeep_idle_minutes", "Upkeep idle time (minutes)", "Periodic upkeep skips tables written less than this "
          "long ago.", kind=NUMBER, default="10", scope=PROCESS, minimum=0),
    Field("vacuum_retention_hours", "VACUUM retention (hours)", "VACUUM keeps files removed less than this long ago "
          "(minimum and default: Delta's 168).", kind=NUMBER, default="168", scope=PROCESS, minimum=168),
    # Runtime settings: how a door's process runs its engines and shows its state (every door).
    Field("spark_idle_minutes", "Spark idle time (minutes)", "With engine auto: stop the local Apache Spark engine "
          "after this long without work (0 = keep it once started).", kind=NUMBER, default="10", scope=RUNTIME,
          minimum=0),
    Field("engine_max_memory_mb", "Embedded engine memory bound (MiB)", "Replace the embedded Sail engine's process "
          "between requests once its resident memory passes this (never under a running request; 0 = never). Sail "
          "keeps memory for every statement it runs, so this bounds the destination's memory over weeks. Empty: "
          "1024. With engine_memory_headroom_mb the bound is the lower of this and the engine's own.",
          kind=NUMBER, env="DELTA_DESTINATION_ENGINE_MAX_MEMORY_MB", scope=RUNTIME, minimum=0),
    Field("engine_memory_headroom_mb", "Embedded engine memory headroom (MiB)", "Derive the embedded engine's bound "
          "from the engine itself: its resident memory once warm (after 20 requests) plus this; a healthy engine "
          "is then replaced about once per 500 requests or less often, and a warning says when it grew faster. "
          "0 = only engine_max_memory_mb. Empty: 0, or 256 in a Conduit connector.", kind=NUMBER,
          env="DELTA_DESTINATION_ENGINE_MEMORY_HEADROOM_MB", scope=RUNTIME, minimum=0),
    Field("engine_max_requests", "Embedded engine requests bound", "Also replace the embedded Sail engine's process "
          "after it served this many requests (0 = no such bound).", kind=NUMBER, default="0", scope=RUNTIME,
          minimum=0),
    Field("compact_small_files", "Compact after small files", "Rewrite a table's small files (under 16 MiB) into "
          "bigger ones in the background once it holds this many (a commit that changes no data; tables the "
          "embedded engine created); every commit of a small batch adds one, and the embedded engine's MERGE reads "
          "them all. 0 = never.", kind=NUMBER, default="50", env="DELTA_DESTINATION_COMPACT_SMALL_FILES",
          scope=RUNTIME, minimum=0),
    Field("metrics_port", "Metrics port", "Serve Prometheus metrics at /metrics on this port (every interface) or "
          "host:port, e.g. 127.0.0.1:9464; empty: off.", env="DELTA_DESTINATION_METRICS_PORT", scope=RUNTIME,
          placeholder="9464"),
)
BY_KEY = {f.key: f for f in FIELDS}
ALIASES = {a: f.key for f in FIELDS for a in f.aliases}
CONNECTION_FIELDS = tuple(f for f in FIELDS if f.scope == CONNECTION)
RUNTIME_FIELDS = tuple(f for f in FIELDS if f.scope == RUNTIME)


@dataclass(frozen=True)
class Runtime:
    """How a door's process runs (the RUNTIME fields): one per process, unlike Settings, which a
    Fivetran request's configuration may change."""

    spark_idle_minutes: float = 10.0
    engine_max_memory_mb: Optional[float] = None   # None: the door's default (DEFAULT_ENGINE_MAX_MEMORY_MB)
    engine_memory_headroom_mb: Optional[float] = None   # None: the door's default (DEFAULT_ENGINE_MEMORY_HEADROOM_MB)
    engine_max_requests: int = 0
    compact_small_files: int = 50
    metrics_port: str = ""

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
            raw = f.default
        if f.kind == NUMBER and raw == "":
            continue   # no default of its own: the Runtime field's (a door's default)
        if f.kind == NUMBER:
            try:
                number = float(raw)
            except (TypeError, ValueError):
                raise InvalidRequest(f"{f.key} must be a number") from None
            if isinstance(raw, bool) or (f.minimum is not None and number < f.minimum):
                raise InvalidRequest(f"{f.key} must be a number of at least {f.minimum:g}")
            out[f.key] = int(number) if f.key in ("engine_max_requests", "compact_small_files") else number
        else:
            out[f.key] = str(raw).strip()
    return Runtime(**out)


@dataclass(frozen=True)
class Settings:
    warehouse: str
    engine: str = AUTO                   # auto (chosen per request: engines/choice.py), sail or spark
    spark_remote: Optional[str] = None   # None = an engine this process starts itself
    memory_budget_gb: Optional[float] = None  # None = $DELTA_DESTINATION_MEMORY_BUDGET_GB or the default
    storage: StorageOptions = StorageOptions()
    catalog_uri: Optional[str] = None

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise InvalidRequest(f"engine must be one of {', '.join(ENGINES)}")
        if self.spark_remote and not self.spark_remote.startswith("sc://"):
            raise InvalidRequest("spark_remote must be a Spark Connect URL like sc://host:15002")
        if self.memory_budget_gb is not None and not self.memory_budget_gb > 0:
            raise InvalidRequest("memory_budget_gb must be a positive number of GB")
        if self.catalog_uri and not self.catalog_uri.startswith("thrift://"):
            raise InvalidRequest("catalog_uri must be a Hive Metastore URI like thrift://host:9083")
        if self.catalog_uri and self.engine == "sail":
            raise InvalidRequest("catalog_uri needs the Apache Spark engine to register tables (engine spark, or a "
                                 "Spark Connect server whose catalog is this metastore); Sail cannot register them")
        if self.storage.endpoint and not self.storage.endpoint.startswith(("http://", "https://")):
            raise InvalidRequest("s3_endpoint must be an http:// or https:// URL")
        if bool(self.storage.access_key_id) != bool(self.storage.secret_access_key):
            raise InvalidRequest("s3_access_key_id and s3_secret_access_key go together: give both or neither")
        azure = self.storage.azure
        if azure.client_secret and not (azure.client_id and azure.tenant_id):
            raise InvalidRequest("azure_client_secret needs azure_client_id and azure_tenant_id")
        if azure.emulator_url and not azure.emulator_url.startswith(("http://", "https://")):
            raise InvalidRequest("azure_emulator_url must be an http:// or https:// URL")
        gcs = self.storage.gcs
        try:
            gcs.key
        except ValueError as exc:   # gcs.InvalidKey: names the setting, never the key
            raise InvalidRequest(str(exc)) from None
        if gcs.endpoint and "://" in gcs.endpoint and not gcs.endpoint.startswith(("http://", "https://")):
            raise InvalidRequest("gcs_endpoint must be an http:// or https:// URL (or host:port)")

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


def parse_bool(key: str, value: Any) -> Optional[bool]:
    """`auto` or empty: not set.
    >>> parse_bool("x", "True"), parse_bool("x", "auto"), parse_bool("x", False)
    (True, None, False)
    """
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("", "auto"):
        return None
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise InvalidRequest(f"{key} must be true or false")


def from_values(values: Mapping[str, Any], base: Optional[Settings] = None) -> Settings:
    """Settings from key -> value (only the keys of FIELDS that are connection settings; other
    keys are the door's business). Values are validated; messages name the key, never a secret."""
    v = {k: (x.strip() if isinstance(x, str) else x) for k, x in normalise_keys(values).items()}
    base = base or Settings(warehouse=normalise_root(BY_KEY["warehouse"].default))
    engine = (v.get("engine") or "").lower() if isinstance(v.get("engine"), str) else v.get("engine")
    if engine and engine not in ENGINES:
        raise InvalidRequest(f"engine must be one of {', '.join(ENGINES)}")
    remote = v.get("spark_remote") or None
    if not engine:
        # With auto the remote endpoint is the Apache Spark of auto's choices; a Sail-only destination
        # given a remote endpoint uses it as Apache Spark for everything.
        engine = "spark" if remote and not base.spark_remote and base.engine == "sail" else base.engine
    budget = v.get("memory_budget_gb")
    if budget is not None and not isinstance(budget, (int, float)):
        budget = parse_budget(str(budget))
    elif budget is not None and (isinstance(budget, bool) or not budget > 0):
        raise InvalidRequest("memory_budget_gb must be a positive number of GB")
    s = base.storage
    storage = StorageOptions(
        endpoint=v.get("s3_endpoint", s.endpoint) or "",
        region=v.get("s3_region", s.region) or "",
        access_key_id=v.get("s3_access_key_id", s.access_key_id) or "",
        secret_access_key=v.get("s3_secret_access_key", s.secret_access_key) or "",
        session_token=v.get("s3_session_token", s.session_token) or "",
        path_style=parse_bool("s3_path_style", v["s3_path_style"]) if "s3_path_style" in v else s.path_style,
        azure=azure_options(v, s.azure),
        gcs=gcs_options(v, s.gcs),
    )
    return replace(
        base,
        warehouse=normalise_root(v["warehouse"]) if v.get("warehouse") else base.warehouse,
        engine=engine,
        spark_remote=remote or base.spark_remote,
        memory_budget_gb=float(budget) if budget is not None else base.memory_budget_gb,
        storage=storage,
        catalog_uri=v.get("catalog_uri") or base.catalog_uri,
    )


def azure_options(v: Mapping[str, Any], base: AzureOptions) -> AzureOptions:
    """The azure_* settings over `base` (what a request does not give stays)."""
    emulator = parse_bool("azure_use_emulator", v["azure_use_emulator"]) if "azure_use_emulator" in v else None
    return AzureOptions(
        account_name=v.get("azure_account_name", base.account_name) or "",
        account_key=v.get("azure_account_key", base.account_key) or "",
        sas_token=v.get("azure_sas_token", base.sas_token) or "",
        client_id=v.get("azure_client_id", base.client_id) or "",
        client_secret=v.get("azure_client_secret", base.client_secret) or "",
        tenant_id=v.get("azure_tenant_id", base.tenant_id) or "",
        use_emulator=base.use_emulator if emulator is None else emulator,
        emulator_url=v.get("azure_emulator_url", base.emulator_url) or "",
    )


def gcs_options(v: Mapping[str, Any], base: GcsOptions) -> GcsOptions:
    """The gcs_* settings over `base` (what a request does not give stays)."""
    return GcsOptions(
        service_account_key=v.get("gcs_service_account_key", base.service_account_key) or "",
        credentials_file=v.get("gcs_credentials_file", base.credentials_file) or "",
        endpoint=v.get("gcs_endpoint", base.endpoint) or "",
    )


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
        default = None if f.scope != PROCESS else float(f.default)
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
           "ENGINES", "AUTO", "parse_budget", "normalise_keys"]
