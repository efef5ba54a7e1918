"""The warehouse's stores, one module each, chosen by the warehouse URL's scheme (stores.py):

    local.py   a directory                      s3.py    s3://bucket/prefix (and s3a://)
    azure.py   abfss://container@account.dfs.core.windows.net/prefix, az://, wasbs://
    gcs.py     gs://bucket/prefix (Apache Spark engine only: see its docstring)

Each store's module holds its typed settings, its client for the destination's own files (listing
and removing private prefixes, staging Parquet, probes, log reads) and every conversion of its
settings: delta-rs `storage_options`, an embedded Sail process's environment, Hadoop's settings for
the Spark engine (the `Store` interface, store.py), and its settings themselves (`FIELDS`, which
settings.FIELDS gathers) with their checks. Adding a store: a module here and one entry in
`stores.STORES`; `StorageOptions` (stores.py) gains the store's part from the table."""
from .azure import AzureOptions, AzureStorage
from .gcs import GcsOptions, GcsStorage
from .files import PARQUET_PART_WRITERS, Entry, Storage, is_url, url_scheme
from .local import LocalStorage
from .s3 import S3Options, S3Storage, s3_client
from .store import Store, UnlistedStorage
from .stores import (OBJECT_STORE_SCHEMES, SCHEME_ALIASES, STORES, StorageOptions, canonical, delta_rs_options,
                     sail_environment, served_by_environment, storage_for, store_for)

__all__ = ["AzureOptions", "AzureStorage", "Entry", "GcsOptions", "GcsStorage", "LocalStorage", "OBJECT_STORE_SCHEMES", "PARQUET_PART_WRITERS",
           "S3Options", "S3Storage", "SCHEME_ALIASES", "STORES", "Storage", "StorageOptions", "Store",
           "UnlistedStorage", "canonical", "delta_rs_options", "is_url", "s3_client", "sail_environment",
           "served_by_environment", "storage_for", "store_for", "url_scheme"]
