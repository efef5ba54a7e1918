"""One run of a tester input against a server: Capabilities, CreateTable / AlterTable, the ops in
order, the schema migrations, DescribeTable, then every table read back and compared with the
reference model. Every deviation is collected as a problem; the run itself does not raise.

AlterTable (the input's ``alter_table``): the new primary key is exactly the request's; columns
absent from the request are kept (drop_columns=false) and are no longer part of the key.
"""
from __future__ import annotations

import copy
import shutil
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Optional

import grpc

from delta_destination.core.delta_log import has_commits
from delta_destination.errors import InvalidRequest
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.batch_files import FileFormat
from delta_destination.doors.fivetran.convert import table_from_proto, table_to_proto
from . import migrations
from .batch_writer import BatchWriter
from .compare import compare_rows, compare_schema, read_back, table_path, type_name, warehouse_of
from .inputs import build_table, load_input
from .ops import OPS
from .state import RPC_TIMEOUT, RunResult, RunState
from .values import sort_key


class TesterRun(RunState):
    """A run: its state, and the order of its steps."""

    # -- the whole run -----------------------------------------------------------------------
    def run(self, handover: Optional[tuple[int, Any]] = None) -> RunResult:
        if not self.check_capabilities():
            return RunResult(ok=False, problems=list(self.problems), tables={}, notes=list(self.notes))
        directory = Path(tempfile.mkdtemp(prefix="tester-batch-"))
        self.batches = BatchWriter(directory, self.rng, compression=self.compression, plain_text=self.plain_text,
                                   file_format=self.file_format)
        try:
            self.create_tables()
            self.alter_tables()
            self.run_ops(handover)
            migrations.run_steps(self)
            self.describe_tables()
            tables = self.compare_data()
        finally:
            shutil.rmtree(directory, ignore_errors=True)
            self.batches = None
        return RunResult(ok=not self.problems, problems=list(self.problems), tables=tables, notes=list(self.notes))

    def run_ops(self, handover: Optional[tuple[int, Any]]) -> None:
        """The input's ops in order; from op `handover[0]` on (and after them) on `handover[1]`."""
        for i, step in enumerate(self.spec.get("ops") or []):
            if handover is not None and i == handover[0]:
                self.log(f"ops[{i}]: handing over to the other server")
                self.stub = handover[1]
            for op_name, payload in step.items():
                send = OPS.get(op_name)
                if send is None:
                    self.problem(f"ops[{i}]: unknown op {op_name!r}")
                    continue
                self.log(f"ops[{i}] {op_name}")
                send(self, i, payload)
        if handover is not None:
            self.stub = handover[1]

    def check_capabilities(self) -> bool:
        """Fivetran asks first which batch file format the destination wants."""
        try:
            resp = self.stub.Capabilities(pb.CapabilitiesRequest(), timeout=RPC_TIMEOUT)
        except grpc.RpcError as e:
            self.problem(f"Capabilities raised {e.code().name if e.code() else '?'}: {e.details()}")
            return False
        announced = FileFormat.PARQUET if resp.batch_file_format == pb.PARQUET else FileFormat.CSV
        self.log(f"Capabilities: batch files as {announced.name}")
        if announced != self.file_format:
            self.problem(f"Capabilities announces {announced.name} batch files, this run writes "
                         f"{self.file_format.name}: start the server with that format or pass file_format")
            return False
        return True

    def is_history(self, spec: dict) -> bool:
        return bool(spec.get("history_mode")) and not self.live_only

    def create_tables(self) -> None:
        for name, spec in (self.spec.get("create_table") or {}).items():
            history = self.is_history(spec)
            schema = build_table(name, spec, history=history)
            self.log(f"CreateTable {name} ({len(schema.columns)} columns{', history mode' if history else ''})")
            resp = self.call("CreateTable", pb.CreateTableRequest(
                configuration=self.configuration, schema_name=self.schema, table=table_to_proto(schema)),
                f"create_table {name}")
            if resp is not None:
                self.model.create_table(schema, history)

    def alter_tables(self) -> None:
        for name, spec in (self.spec.get("alter_table") or {}).items():
            t = self.model.tables.get(name)
            if t is None:
                self.problem(f"alter_table {name}: the table was not created")
                continue
            new = build_table(name, spec, history=t.history)
            self.log(f"AlterTable {name}")
            resp = self.call("AlterTable", pb.AlterTableRequest(
                configuration=self.configuration, schema_name=self.schema, table=table_to_proto(new),
                drop_columns=False), f"alter_table {name}")
            if resp is not None:
                self.model.alter_table(name, new.columns)

    # -- checking ----------------------------------------------------------------------------
    def tables_to_describe(self) -> list[str]:
        """``describe_table``; after migrations also every table the model holds and every table a
        migration removed."""
        names = list(self.spec.get("describe_table") or [])
        if self.migrated:
            names += [n for n in self.model.tables if n not in names]
            names += [n for n in sorted(self.vanished) if n not in names and n not in self.model.tables]
        return names

    def describe_tables(self) -> None:
        """DescribeTable against the model (a table the model lacks: expected not_found, and no Delta
        table left at its location)."""
        for name in self.tables_to_describe():
            resp = self.call("DescribeTable", pb.DescribeTableRequest(
                configuration=self.configuration, schema_name=self.schema, table_name=name),
                f"describe_table {name}", ok_fields=("table", "not_found"))
            if resp is not None:
                self.check_description(name, resp)
        warehouse = warehouse_of(self.warehouse, self.storage_options)
        for name in sorted(self.vanished - set(self.model.tables)):
            gone = table_path(self.warehouse, self.schema, name, self.storage_options)
            if has_commits(warehouse, gone):
                self.problem(f"table {name}: removed by a migration, but a Delta table is still at {gone}")

    def check_description(self, name: str, resp: pb.DescribeTableResponse) -> None:
        which = resp.WhichOneof("response")
        t = self.model.tables.get(name)
        if t is None:
            if which != "not_found":
                self.problem(f"DescribeTable {name}: expected not_found, got {which}")
            else:
                self.log(f"DescribeTable {name}: not_found, as expected")
            return
        if which != "table":
            self.problem(f"DescribeTable {name}: expected the table, got {which}")
            return
        try:
            actual = list(table_from_proto(resp.table).columns)
        except InvalidRequest as e:
            self.problem(f"DescribeTable {name}: {e}")
            return
        for p in compare_schema(t.schema, actual):
            self.problem(f"DescribeTable {name}: {p}")
        self.log(f"DescribeTable {name}: {len(actual)} columns compared")

    def compare_data(self) -> dict:
        """Every table of the model read back and compared; the rows read, for the result."""
        tables = {}
        for name, t in self.model.tables.items():
            rows, problems = read_back(self.warehouse, self.schema, t, self.storage_options)
            if not problems:
                problems = compare_rows(t, rows)
            for p in problems:
                self.problem(f"table {name}: {p}")
            cols = t.schema.column_names
            rows.sort(key=lambda r: [sort_key(r.get(c)) for c in cols])
            tables[name] = {"columns": [(c.name, type_name(c), c.primary_key) for c in t.schema.columns],
                            "rows": rows}
            self.log(f"table {name}: {len(rows)} rows read back, {len(t.rows)} expected")
        return tables


def run_spec(stub, warehouse, spec: dict, schema: str = "tester", *, live_only: bool = False,
             compression=None, plain_text: bool = False, file_format=None, seed: int = 0,
             start_time: Optional[datetime] = None, run_migrations: bool = False,
             configuration: Optional[dict] = None, log: Optional[Callable[[str], None]] = None,
             handover: Optional[tuple[int, Any]] = None, storage_options: Optional[dict] = None) -> RunResult:
    """Like run_input_file, for an input already loaded (or built) as a dict.

    `handover=(n, other_stub)`: from op n on (the remaining ops, migrations, describes) the run
    talks to `other_stub` -- another server on the same warehouse, e.g. the other engine.
    `storage_options`: how delta-rs reaches an object-store warehouse (AWS_* keys)."""
    run = TesterRun(stub, warehouse, copy.deepcopy(spec), schema, live_only=live_only, compression=compression,
                    plain_text=plain_text, file_format=file_format, seed=seed, start_time=start_time,
                    run_migrations=run_migrations, configuration=configuration, log=log,
                    storage_options=storage_options)
    return run.run(handover)


def run_input_file(stub, warehouse, input_path, schema: str = "tester", **options) -> RunResult:
    """Run one tester input file (see run_spec for the options)."""
    return run_spec(stub, warehouse, load_input(input_path), schema, **options)
