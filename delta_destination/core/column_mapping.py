"""Whether a rename or a drop changes only the Delta log, and what the table needs first.

Delta renames and drops a column in its log alone on a table with column mapping (data files name
columns by physical names). Tables the embedded engine creates have none; under the `column_changes`
setting `in_place` (the default) such a table gets it at its first rename or drop (one commit that
changes no data file: engines/dialect.py COLUMN_MAPPING_UPGRADE), on an engine that can (Apache
Spark + Delta; auto hands the request to it). Under `rewrite` no table's protocol changes: a table
already mapped is still renamed in place where the engine can, others are rewritten. Pure rules on
the table's Delta configuration, so they are unit-tested without an engine.
"""
from __future__ import annotations

from typing import Mapping, Optional

from ..engines.router import COLUMN_MAPPING, COLUMN_MAPPING_UPGRADE, MAPPED_MODES
from ..settings import IN_PLACE


def has_column_mapping(configuration: Mapping[str, str]) -> bool:
    """
    >>> has_column_mapping({"delta.columnMapping.mode": "name"}), has_column_mapping({})
    (True, False)
    """
    return configuration.get(COLUMN_MAPPING) in MAPPED_MODES


def wants_engine_that_maps(column_changes: str) -> bool:
    """Should auto hand a rename or drop to the engine that makes them in place? Only under
    `in_place`: under `rewrite` a table auto's Sail serves stays there and is rewritten, as before."""
    return column_changes == IN_PLACE


def mapping_upgrade(configuration: Mapping[str, str], column_changes: str, engine_maps: bool) -> Optional[dict[str, str]]:
    """The table properties to set before a rename or drop in place ({}: none, the table is mapped),
    or None: rewrite the table (the engine cannot, or `rewrite` keeps the table's protocol).
    >>> mapping_upgrade({"delta.columnMapping.mode": "name"}, "rewrite", True)
    {}
    >>> mapping_upgrade({}, "rewrite", True) is None, mapping_upgrade({}, "in_place", False) is None
    (True, True)
    >>> sorted(mapping_upgrade({}, "in_place", True))
    ['delta.columnMapping.mode', 'delta.feature.columnMapping', 'delta.feature.timestampNtz']
    """
    if not engine_maps:
        return None
    if has_column_mapping(configuration):
        return {}
    return dict(COLUMN_MAPPING_UPGRADE) if column_changes == IN_PLACE else None
