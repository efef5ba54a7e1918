"""The state of one tester run, shared by the steps that send requests (ops.py, migrations.py) and
the run that orders them (runner.py): the server's stub, the run's options, the reference model, the
batch-file writer, and the problems and notes so far."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Optional

import grpc

from delta_destination.doors.fivetran.batch_files import Compression, FileFormat
from .batch_writer import BatchWriter
from .reference_model import ReferenceModel
from .values import ONE_MS

RPC_TIMEOUT = 600.0


@dataclass
class RunResult:
    ok: bool
    problems: list[str]
    tables: dict  # table name -> {"columns": [(name, type, key)], "rows": [row dicts read back, sorted]}
    notes: list[str] = field(default_factory=list)


class Clock:
    """Monotonic `_fivetran_synced` values, ms precision, one step per op."""

    def __init__(self, start: Optional[datetime] = None):
        if start is None:
            start = datetime.now(timezone.utc)
        start = start.astimezone(timezone.utc)
        self.current = start.replace(microsecond=(start.microsecond // 1000) * 1000)

    def next_op(self) -> datetime:
        self.current = self.current + timedelta(seconds=1, milliseconds=1)
        return self.current

    def cut(self) -> datetime:
        """A truncate cut just (1 ms) after every value handed out so far."""
        self.current = self.current + ONE_MS
        return self.current


class RunState:
    """One run's connection, options and findings; every RPC goes through `call`."""

    def __init__(self, stub, warehouse, spec: dict, schema: str, *, live_only: bool = False,
                 compression=None, plain_text: bool = False, file_format=None, seed: int = 0,
                 start_time: Optional[datetime] = None, run_migrations: bool = False,
                 configuration: Optional[dict] = None, log: Optional[Callable[[str], None]] = None,
                 storage_options: Optional[dict] = None):
        self.stub = stub
        self.warehouse = str(warehouse)
        self.storage_options = storage_options  # delta-rs options of an object-store warehouse
        self.spec = spec
        self.schema = schema
        self.live_only = live_only
        self.file_format = FileFormat.CSV if file_format is None else FileFormat(file_format)
        self.compression = Compression.ZSTD if compression is None else compression
        if self.file_format == FileFormat.PARQUET:
            self.compression = Compression.OFF  # Parquet batch files get no extra compression
        self.plain_text = plain_text
        self.rng = random.Random(seed)
        self.clock = Clock(start_time)
        self.run_migrations = run_migrations
        self.configuration = dict(configuration or {})
        self.log = log or (lambda msg: None)
        self.model = ReferenceModel()
        self.batches: Optional[BatchWriter] = None  # while the run's batch-file directory exists
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.migrated = False  # schema_migration steps were run
        self.vanished: set[str] = set()  # tables a migration dropped or renamed away

    # -- reporting ---------------------------------------------------------------------------
    def problem(self, msg: str) -> None:
        self.problems.append(msg)
        self.log(f"PROBLEM: {msg}")

    def note(self, msg: str) -> None:
        self.notes.append(msg)
        self.log(msg)

    def call(self, rpc: str, request, context: str, *, ok_fields=("success",)):
        """Call an RPC; a raised error, a task or a warning is a problem."""
        try:
            resp = getattr(self.stub, rpc)(request, timeout=RPC_TIMEOUT)
        except grpc.RpcError as e:
            code = e.code().name if hasattr(e, "code") and e.code() else "?"
            details = e.details() if hasattr(e, "details") else str(e)
            self.problem(f"{rpc} ({context}) raised {code}: {details}")
            return None
        which = resp.WhichOneof("response")
        if which == "task":
            self.problem(f"{rpc} ({context}) answered task: {resp.task.message}")
        elif which == "warning":
            self.problem(f"{rpc} ({context}) answered warning: {resp.warning.message}")
        elif which not in ok_fields:
            self.problem(f"{rpc} ({context}) answered {which!r}, expected one of {list(ok_fields)}")
        return resp
