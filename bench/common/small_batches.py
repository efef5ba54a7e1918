"""What Fivetran mostly sends: many tables, each getting small batches of upserts, partial updates
and deletes. Shared by the soak (bench/soak/run.py) and the sync benchmark.

Each table has its own batch writer (own seed, own folder: tables are written from several
threads) and its own place in one reference model (testkit/tester), which applies every batch
the way the destination must; at the end every table is read back with delta-rs and compared
with the model row by row.
"""
from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from delta_destination.core.model import Column, DataType as FT, TableSchema
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.batch_files import Compression, FileFormat
from delta_destination.doors.fivetran.convert import table_to_proto
from testkit.tester.batch_writer import BatchWriter
from testkit.tester.compare import compare_rows, read_back
from testkit.tester.reference_model import ReferenceModel

SYNCED = "_fivetran_synced"
COLUMNS = (
    Column("id", FT.LONG, primary_key=True),
    Column("name", FT.STRING),
    Column("qty", FT.INT),
    Column("price", FT.DOUBLE),
    Column("amount", FT.DECIMAL, precision=18, scale=4),
    Column("active", FT.BOOLEAN),
    Column("updated_at", FT.UTC_DATETIME),
    Column("note", FT.STRING),
    Column(SYNCED, FT.UTC_DATETIME),
)
BASE_TIME = datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Shape:
    """One incremental batch of a table: `upserts` rows of which `new_share` have new keys,
    `updates` partial updates (two columns; the rest unmodified) and `deletes` hard deletes,
    each of a different stored key."""

    initial_rows: int = 2000
    upserts: int = 40
    new_share: float = 0.5
    updates: int = 8
    deletes: int = 2


def table_name(i: int) -> str:
    return f"t{i:03d}"


class TableFeed:
    """The batches of one table and what they should leave in it."""

    def __init__(self, model: ReferenceModel, name: str, directory: Path, seed: int, shape: Shape):
        self.model, self.name, self.shape = model, name, shape
        self.schema = TableSchema(name, COLUMNS)
        model.create_table(self.schema)
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(seed)
        self.writer = BatchWriter(directory, random.Random(seed + 1), compression=Compression.ZSTD,
                                  plain_text=False, file_format=FileFormat.CSV)
        self.next_id = 1
        self.step = 0

    @property
    def table(self):
        return self.model.tables[self.name]

    @property
    def proto(self):
        return table_to_proto(self.schema)

    def _row(self, key: int) -> dict:
        r = self.rng
        return {"id": key, "name": f"name {key} {r.randrange(10**6)}", "qty": r.randrange(-1000, 1000),
                "price": round(r.uniform(0, 1000), 3), "amount": Decimal(r.randrange(-10**9, 10**9)) / 10000,
                "active": r.random() < 0.5,
                "updated_at": BASE_TIME + timedelta(milliseconds=r.randrange(10**10)),
                "note": None if r.random() < 0.2 else "x" * r.randrange(0, 60),
                SYNCED: self._synced()}

    def _synced(self) -> datetime:
        return BASE_TIME + timedelta(seconds=self.step)

    def _new_keys(self, n: int) -> list[int]:
        keys = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return keys

    def initial(self, schema: str) -> pb.WriteBatchRequest:
        """The table's first load: `initial_rows` new rows."""
        self.step += 1
        rows = [self._row(k) for k in self._new_keys(self.shape.initial_rows)]
        req = self.writer.batch_request(self.table, schema, {}, replace=rows)
        self.model.upsert(self.name, rows)
        return req

    def incremental(self, schema: str) -> pb.WriteBatchRequest:
        """One incremental batch (see Shape); the model applies it as the destination must."""
        self.step += 1
        s = self.shape
        stored = [k[0] for k in self.table.rows]
        new = int(round(s.upserts * s.new_share))
        picked = self.rng.sample(stored, min(len(stored), s.upserts - new + s.updates + s.deletes))
        again, rest = picked[:s.upserts - new], picked[s.upserts - new:]
        updated, deleted = rest[:s.updates], rest[s.updates:s.updates + s.deletes]
        upserts = [self._row(k) for k in again + self._new_keys(new)]
        updates = [{"id": k, "qty": self.rng.randrange(-1000, 1000), "note": f"updated at {self.step}",
                    SYNCED: self._synced()} for k in updated]
        deletes = [{"id": k, SYNCED: self._synced()} for k in deleted]
        req = self.writer.batch_request(self.table, schema, {}, replace=upserts, update=updates, delete=deletes)
        self.model.upsert(self.name, upserts)
        self.model.update(self.name, updates)
        self.model.delete(self.name, deletes)
        return req

    @staticmethod
    def remove_files(req) -> None:
        """A request's batch files, once answered (Fivetran removes them too)."""
        for path in (*req.replace_files, *req.update_files, *req.delete_files):
            Path(path).unlink(missing_ok=True)


class SmallBatches:
    """`tables` tables fed by TableFeed, in one reference model."""

    def __init__(self, directory: Path, tables: int, shape: Shape = Shape(), seed: int = 7):
        self.directory = directory
        self.model = ReferenceModel()
        self.feeds = [TableFeed(self.model, table_name(i), directory / table_name(i), seed * 1000 + i, shape)
                      for i in range(tables)]

    def problems(self, warehouse: str, schema: str, storage_options=None) -> list[str]:
        """Every difference between the tables read back with delta-rs and the model (empty: equal)."""
        out = []
        for feed in self.feeds:
            rows, problems = read_back(warehouse, schema, feed.table, storage_options)
            out += [f"{feed.name}: {p}" for p in problems + compare_rows(feed.table, rows)]
        return out

    def cleanup(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
