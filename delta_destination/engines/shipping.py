"""Handing Arrow data to the engine as a temporary view.

Spark Connect refuses messages over 128 MiB and Sail does not implement the chunked
cached-relation upload Apache Spark uses for big local data; above LOCAL_RELATION_LIMIT a
batch is staged instead (how: the dialect's `staged`), in a private area of the warehouse
that is removed right after, and at the next start after a crash (private_areas.py).
"""
from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from typing import Callable, Iterator

import pyarrow as pa

from .. import logs
from ..warehouse import Warehouse
from .errors import run_engine

log = logs.get(__name__)

LOCAL_RELATION_LIMIT = int(os.environ.get("FIVETRAN_DELTA_LOCAL_RELATION_LIMIT", 64 * 1024 * 1024))


def new_view_name() -> str:
    return f"fivetran_src_{uuid.uuid4().hex}"


def drop_view(spark, view: str) -> None:
    try:
        spark.catalog.dropTempView(view)
    except Exception:  # noqa: BLE001 - best effort: the session forgets views at its end
        pass


@contextmanager
def as_local_relation(spark, data: pa.Table) -> Iterator[str]:
    """`data` in one Spark Connect message (up to LOCAL_RELATION_LIMIT), as one contiguous
    record batch: a source stacked from many small parts would otherwise travel as many tiny
    batches (the copy is cheap at this size; staged batches are never copied whole)."""
    view = new_view_name()
    try:
        with logs.timed(log, f"shipping {data.num_rows} rows to the engine"):
            spark.createDataFrame(data.combine_chunks()).createOrReplaceTempView(view)
        yield view
    finally:
        drop_view(spark, view)


def chunks(data: pa.Table) -> Iterator[pa.Table]:
    """Zero-copy slices of `data` of at most ~LOCAL_RELATION_LIMIT bytes each."""
    rows = max(1, int(data.num_rows * LOCAL_RELATION_LIMIT / max(data.nbytes, 1)))
    for offset in range(0, data.num_rows, rows):
        yield data.slice(offset, rows)


@contextmanager
def staged_in_chunks(spark, warehouse: Warehouse, data: pa.Table, engine_path: Callable[[str], str] = str) -> Iterator[str]:
    """A batch too big for one local relation, appended in chunks to a private staging Delta
    table under the warehouse (removed right after, and at start-up after a crash)."""
    view = new_view_name()
    staging = warehouse.private_areas.new_staging_location()
    path = engine_path(staging)
    try:
        for chunk in chunks(data):
            run_engine("stage batch chunk",
                       lambda: spark.createDataFrame(chunk).write.format("delta").mode("append").save(path))
        spark.read.format("delta").load(path).createOrReplaceTempView(view)
        yield view
    finally:
        drop_view(spark, view)
        warehouse.storage.delete_tree(staging)


@contextmanager
def staged_as_parquet(spark, warehouse: Warehouse, data: pa.Table, engine_path: Callable[[str], str] = str) -> Iterator[str]:
    """A batch too big for one local relation, written by pyarrow as Parquet files to a private
    staging folder of the warehouse (on an object store: its private prefix, which a cluster's
    executors read directly) and read by the engine in parallel (removed right after, and at
    the next start after a crash)."""
    view = new_view_name()
    staging = warehouse.private_areas.new_staging_location()
    try:
        warehouse.storage.write_parquet_parts(staging, chunks(data))
        path = engine_path(staging)
        run_engine("read the staged batch", lambda: spark.read.parquet(path).createOrReplaceTempView(view))
        yield view
    finally:
        drop_view(spark, view)
        warehouse.storage.delete_tree(staging)
