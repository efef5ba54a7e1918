"""The one table of stores: which module serves a warehouse URL's scheme, and every store's settings
in one value (`StorageOptions`, made from the table). Adding a store is a module beside this one
(its `Store`, `Storage`, settings fields and options type) and one entry in STORES."""
from __future__ import annotations

import hashlib
import os
from dataclasses import astuple, field, make_dataclass
from typing import Mapping, Optional

from . import azure, gcs, local, s3
from .files import Storage, url_scheme
from .store import UNLISTED, Store

STORES: tuple[Store, ...] = (local.STORE, s3.STORE, azure.STORE, gcs.STORE)


def _identity(self) -> str:
    """A stable, non-reversible name of these options (caches key on it; never the secret).
    >>> a, b = (StorageOptions(s3=s3.S3Options(secret_access_key=k)) for k in "xy")
    >>> a.identity() != b.identity(), StorageOptions().identity() == StorageOptions().identity()
    (True, True)
    """
    return hashlib.sha256(repr(astuple(self)).encode("utf-8")).hexdigest()[:16]


# Every store's settings in one value (what `Settings.storage` and `Warehouse.options` hold): a frozen
# dataclass with one field per store that has settings, named as the store (`options.s3.endpoint`,
# `options.azure.account_key`), each its module's options type (defaults: that type's own).
StorageOptions = make_dataclass(
    "StorageOptions",
    [(store.name, store.options_type, field(default_factory=store.options_type))
     for store in STORES if store.options_type is not None],
    namespace={"identity": _identity, "__module__": __name__},
    frozen=True)
del _identity   # StorageOptions.identity is its one name

BY_SCHEME: dict[str, Store] = {
    scheme: store for store in STORES for scheme in (*store.schemes, *store.aliases)
}
# Object stores the destination lists itself and embedded Sail reaches (engines/choice.py).
OBJECT_STORE_SCHEMES = tuple(s for store in STORES for s in store.schemes if s)
SCHEME_ALIASES = {alias: canon for store in STORES for alias, canon in store.aliases.items()}


def store_for(location: str) -> Store:
    """The store of a location (a local path's is the local disk's; an unknown URL's: unlisted)."""
    return BY_SCHEME.get(url_scheme(location), UNLISTED)


def canonical(path: str) -> str:
    """One spelling per place: `s3a://b/k/` -> `s3://b/k`, `file:///x` and `file://localhost/x`
    -> `/x`, `~/x` -> absolute. A `file://` URL naming another host is not a local path: it
    stays a URL.
    >>> canonical("s3a://bucket/wh/"), canonical("file:///tmp/wh"), canonical("file://localhost/tmp/wh")
    ('s3://bucket/wh', '/tmp/wh', '/tmp/wh')
    >>> canonical("FILE://LocalHost/tmp/wh/"), canonical("file://nas/share/wh/")
    ('/tmp/wh', 'file://nas/share/wh')
    """
    scheme = url_scheme(path)
    if scheme == "file":
        authority, slash, rest = path.split("://", 1)[1].partition("/")
        if authority.lower() in ("", "localhost"):
            path = slash + rest
            scheme = ""
    if not scheme:
        return os.path.abspath(os.path.expanduser(path))
    return store_for(path).canonical(path)


def storage_for(root: str, options: Optional[StorageOptions] = None) -> Storage:
    """The client of the store that serves `root` (any spelling), with these settings."""
    root = canonical(root)
    return store_for(root).storage_class(root, options if options is not None else StorageOptions())


def delta_rs_options(location: str, options) -> dict[str, str]:
    """delta-rs `storage_options` for a location with these settings."""
    return store_for(location).delta_rs_options(options)


def served_by_environment(options, environ: Mapping[str, str]) -> bool:
    """Does a process with this environment reach every store with these settings?"""
    return all(store.served_by_environment(options, environ) for store in STORES)


def sail_environment(options, environ: Mapping[str, str]) -> dict[str, str]:
    """A Sail process's environment: per store, this process's own variables where they serve
    the settings, else those variables replaced by the settings."""
    env = dict(environ)
    for store in STORES:
        if store.served_by_environment(options, environ):
            for key, value in store.environment_defaults(environ).items():
                env.setdefault(key, value)
        else:
            for key in store.variables:
                env.pop(key, None)
            env.update(store.sail_environment(options))
    return env
