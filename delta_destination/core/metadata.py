"""Fivetran metadata kept inside the Delta table itself, as the table property `fivetran.schema`.

Spark types cannot tell STRING from JSON/XML/NAIVE_TIME, nor hold string_byte_length
or primary keys, so CreateTable/AlterTable write them here and DescribeTable reads
them back. Other engines see them as ordinary table properties.

Reading is the dialect's business (Sail reads the log's metaData actions, which may
return several values); each write of the property carries a generation number and
the highest one wins, so the order of log files does not matter.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Optional

from .model import Column, DataType, TableSchema
from ..names import quote_ident

PROPERTY = "fivetran.schema"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class StoredMetadata:
    generation: int
    columns: tuple[Column, ...]


def encode(schema: TableSchema, generation: int) -> str:
    cols = []
    for c in schema.columns:
        d = {"name": c.name, "type": DataType(c.type).name, "pk": bool(c.primary_key)}
        if c.type == DataType.DECIMAL:
            p, s = c.decimal_params()
            d["precision"], d["scale"] = p, s
        if c.string_byte_length is not None:
            d["string_byte_length"] = int(c.string_byte_length)
        cols.append(d)
    return json.dumps({"version": FORMAT_VERSION, "generation": generation, "columns": cols}, separators=(",", ":"))


def decode(text: str) -> Optional[StoredMetadata]:
    try:
        d = json.loads(text)
        cols = tuple(
            Column(
                name=c["name"],
                type=DataType[c["type"]],
                primary_key=bool(c.get("pk")),
                precision=c.get("precision"),
                scale=c.get("scale"),
                string_byte_length=c.get("string_byte_length"),
            )
            for c in d["columns"]
        )
        return StoredMetadata(int(d["generation"]), cols)
    except (ValueError, KeyError, TypeError):
        return None  # unreadable metadata: fall back to Spark types


STATS_COLUMNS = "delta.dataSkippingStatsColumns"
NUM_INDEXED = "delta.dataSkippingNumIndexedCols"


NO_STATS_TYPES = (DataType.DECIMAL, DataType.BOOLEAN, DataType.BINARY)


def stats_properties(schema: TableSchema) -> dict[str, str]:
    """File statistics for every column Delta keeps statistics for, but DECIMALs.

    Delta (delta-spark) refuses BOOLEAN and BINARY columns in the list: it has no
    min/max statistics for them. Sail 0.7.2 answers reads of a DECIMAL column from the file's JSON statistics when
    they pin the value, parsed as a double: 11111.123456789012345 in DECIMAL(38,15)
    read back as 11111.123456789013, and a MERGE that rewrote the file stored that.
    Without statistics on DECIMAL columns the values are read from the data.
    """
    cols = [c.name for c in schema.columns if c.type not in NO_STATS_TYPES]
    if not cols:
        return {NUM_INDEXED: "0"}
    return {STATS_COLUMNS: ",".join(quote_ident(c) for c in cols), NUM_INDEXED: "-1"}


# Names delta-spark can read back from the statistics list without backticks.
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def drop_safe_stats_properties(kept: TableSchema) -> dict[str, str]:
    """The statistics settings to hold while columns are dropped in place: only the kept
    columns whose names need no quotes. delta-spark 4.4's DROP COLUMNS writes the list
    back without its backticks and then fails to parse it (a kept `a b` fails the drop
    with "Couldn't find column a"); the full list is written again right after the drop
    (registry.set_metadata), so only that one commit has fewer statistics columns.
    """
    plain = TableSchema(kept.name, tuple(c for c in kept.columns if PLAIN_NAME.fullmatch(c.name)))
    props = stats_properties(plain)
    if STATS_COLUMNS not in props:  # an empty list replaces the stored one (which names odd columns)
        props[STATS_COLUMNS] = ""
    return props


def table_properties(schema: TableSchema, generation: int) -> dict[str, str]:
    return {PROPERTY: encode(schema, generation), **stats_properties(schema)}


def latest(texts: list[str]) -> Optional[StoredMetadata]:
    """The readable metadata with the highest generation among the property's values."""
    best: Optional[StoredMetadata] = None
    for t in texts:
        m = decode(t)
        if m and (best is None or m.generation > best.generation):
            best = m
    return best
