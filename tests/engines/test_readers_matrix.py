"""The readers matrix (docs/readers.md): every kind of table the destination writes, per engine and
per setting, read by each reader teams use, with the outcome asserted: right (the rows and values
written), refused (an error), or WRONG (rows or values that differ, without an error).

Each kind is built once for the module through the destination's own servers, as a user's
deployment makes it: a default-engine server (engine auto, its Apache Spark the session's shared
engine) and an `--engine spark` server on one warehouse. What no request makes on a small table is
made with the statement the destination itself runs: deletion vectors are turned on by the write
plan's property commit (core/write_plan.py deletion_vectors_first, for tables past 64 MiB on Sail
and 8 MiB on Spark), run here on the same engine; Sail's column-mapped table is the destination's
own CREATE statement with `delta.columnMapping.mode` asked for; type widening is turned on as
docs/column-changes.md tells a user to. Every table then gets the same two batches (inserts, then
an upsert, an insert and a hard delete: a MERGE, which writes a deletion vector on a table that has
them on).

The Python readers run in child processes (testkit/readers.py says why); Spark and Sail read over
Spark Connect. DuckDB reads through its `delta` extension from PyPI (duckdb-ext-delta, DuckDB 1.4.4):
DuckDB's own download site is not reachable here.
"""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from delta_destination.core import metadata
from delta_destination.core.sql import column_defs
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.convert import table_from_proto
from delta_destination.engines.statements import create_table_sql, path_identifier, register_table_sql, set_properties_sql
from testkit import readers as R
from testkit.delta_read import commit_history
from testkit.server_process import served
from testkit.fivetran_requests import batch_file, col, table, write_request

UTC = dt.timezone.utc
SYNC1 = dt.datetime(2024, 1, 1, 10, 0, tzinfo=UTC)
SYNC2 = dt.datetime(2024, 1, 2, 10, 0, tzinfo=UTC)

BASE = (col("id", "LONG", pk=True), col("i", "INT"), col("s", "STRING"), col("amount", "DECIMAL", precision=12, scale=2),
        col("f", "DOUBLE"), col("day", "NAIVE_DATE"), col("at", "UTC_DATETIME"), col("flag", "BOOLEAN"),
        col("raw", "BINARY"), col("_fivetran_synced", "UTC_DATETIME"))
NTZ = col("local", "NAIVE_DATETIME")
OLD, GONE, NEW = col("old", "STRING"), col("gone", "STRING"), "new name"


def row(n, **over):
    i = n
    r = {"id": i, "i": i * 10, "s": f"s{i}", "amount": Decimal(f"{i}.25"), "f": i / 4, "day": dt.date(2024, 1, i),
         "at": dt.datetime(2024, 2, i, 12, 30, tzinfo=UTC), "flag": i % 2 == 0, "raw": bytes([i, 0, 255]),
         "_fivetran_synced": SYNC1, "local": dt.datetime(2024, 3, i, 8, 15, 30), "old": f"o{i}", "gone": f"g{i}"}
    r.update(over)
    return r


# Enough rows that Spark's files hold several each: the upsert and the delete then leave rows of a
# file live, which on a table with deletion vectors on is a deletion vector (asserted per kind).
FIRST = [row(i) for i in range(1, 21)]
SECOND = [row(2, s="two", amount=Decimal("-2.50"), i=None, _fivetran_synced=SYNC2), row(21, _fivetran_synced=SYNC2)]
DELETED = [3]


class Build:
    """What the module builds with: the two servers, a Spark session on the shared engine, a Sail engine."""

    def __init__(self, auto, spark_server, spark, sail, tmp_path):
        self.auto, self.spark_server, self.spark, self.sail, self.tmp = auto, spark_server, spark, sail, tmp_path
        self.warehouse = auto.warehouse

    def path(self, name):
        return f"{self.warehouse}/readers/{name}"

    def create(self, srv, t):
        assert srv.stub.CreateTable(pb.CreateTableRequest(schema_name="readers", table=t)).success

    def write(self, srv, t, rows, deletes=()):
        names = {c.name for c in t.columns}
        replace = [batch_file(self.tmp, t, [{k: v for k, v in r.items() if k in names} for r in rows])]
        delete = [batch_file(self.tmp, t, [{"id": i, "_fivetran_synced": SYNC2} for i in deletes], kind="delete")] if deletes else []
        assert srv.stub.WriteBatch(write_request("readers", t, replace=replace, delete=delete)).success

    def operations(self, name) -> list[str]:
        return [c["operation"] for c in commit_history(self.path(name))]

    def both_batches(self, srv, t, before_second=None):
        self.write(srv, t, FIRST)
        if before_second is not None:
            before_second()
        self.write(srv, t, SECOND, DELETED)

    def sail_sql(self, sql):
        self.sail.sql(sql).collect()

    def spark_sql(self, sql):
        self.spark.sql(sql).collect()

    def deletion_vectors_on(self, on_sail, name):
        """The write plan's property commit (core/writer.py before_merge), on Sail (a table registered
        by name, as the Sail dialect names tables) or on Apache Spark (by path)."""
        props = {"delta.enableDeletionVectors": "true"}
        if on_sail:
            return lambda: (self.sail_sql(register_table_sql(f"readers_{name}", self.path(name))),
                            self.sail_sql(set_properties_sql(f"readers_{name}", props)))
        return lambda: self.spark_sql(set_properties_sql(path_identifier(self.path(name)), props))

    def create_with_column_mapping_on_sail(self, t):
        """The destination's CREATE statement (core/tables.py create) with column mapping asked for, on Sail."""
        schema = table_from_proto(t)
        props = {"delta.columnMapping.mode": "name", **metadata.table_properties(schema, 1)}
        self.sail_sql(create_table_sql(f"readers_{t.name}", column_defs(schema.columns), props, location=self.path(t.name)))


def expected_rows(columns, renamed=None, second=SECOND) -> list[dict]:
    """The rows after both batches, in canonical form (`renamed`: old name -> new name)."""
    names = [c.name for c in columns]
    final = {r["id"]: r for r in FIRST}
    final.update({r["id"]: r for r in second})
    for i in DELETED:
        final.pop(i)
    out = []
    for r in final.values():
        r = {k: r[k] for k in names}
        if renamed:
            r = {renamed.get(k, k): v for k, v in r.items()}
        out.append(r)
    return R.canonical_rows(out)


def build_kinds(b: Build) -> dict[str, tuple[str, list[dict]]]:
    """kind -> (table path, the rows every reader should answer)."""
    kinds = {}
    base = list(BASE)

    def plain(name, srv, extra=(), before_second=None, create=None):
        t = table(name, *base, *extra)
        (create or (lambda t: b.create(srv, t)))(t)
        b.both_batches(srv, t, before_second)
        kinds[name] = (b.path(name), expected_rows(t.columns))
        return t

    plain("sail", b.auto)
    plain("sail_dv", b.auto, before_second=b.deletion_vectors_on(True, "sail_dv"))
    t = table("sail_dv_on_spark", *base)
    b.create(b.auto, t)
    b.write(b.auto, t, FIRST)
    b.deletion_vectors_on(False, "sail_dv_on_spark")()
    b.write(b.spark_server, t, SECOND, DELETED)      # a MERGE auto moved to Spark for its size
    kinds["sail_dv_on_spark"] = (b.path("sail_dv_on_spark"), expected_rows(t.columns))
    plain("spark", b.spark_server)
    plain("spark_dv", b.spark_server, before_second=b.deletion_vectors_on(False, "spark_dv"))
    plain("sail_cm", b.auto, create=b.create_with_column_mapping_on_sail)
    plain("sail_ntz", b.auto, extra=(NTZ,))
    plain("spark_ntz", b.spark_server, extra=(NTZ,))

    # A renamed and a dropped column, in place on Apache Spark (both tables have column mapping).
    for name, creator in (("spark_renamed_dropped", lambda t: b.create(b.spark_server, t)),
                          ("sail_cm_renamed_dropped", b.create_with_column_mapping_on_sail)):
        writer = b.spark_server if name.startswith("spark") else b.auto
        t = table(name, *base, OLD, GONE)
        creator(t)
        b.both_batches(writer, t)
        r = b.spark_server.stub.Migrate(pb.MigrateRequest(details=pb.MigrationDetails(
            schema="readers", table=name, rename=pb.RenameOperation(rename_column=pb.RenameColumn(from_column="old", to_column=NEW)))))
        assert r.WhichOneof("response") == "success", r
        kept = table(name, *base, col(NEW, "STRING"))
        assert b.spark_server.stub.AlterTable(pb.AlterTableRequest(schema_name="readers", table=kept, drop_columns=True)).success
        ops = b.operations(name)
        assert "RENAME COLUMN" in ops and "DROP COLUMNS" in ops and ops.count("WRITE") == 1, ops   # in place
        kinds[name] = (b.path(name), expected_rows((*base, OLD), renamed={"old": NEW}))

    # Type widening on (as a user turns it on), one column widened INT -> LONG by the default engine
    # (the AlterTable goes to Spark, in place), the second batch (a value past INT) Sail's again.
    t = table("widened", *base)
    b.create(b.auto, t)
    b.write(b.auto, t, FIRST)
    b.spark_sql(f"ALTER TABLE {path_identifier(b.path('widened'))} SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    wide = table("widened", *[col("i", "LONG") if c.name == "i" else c for c in base])
    assert b.auto.stub.AlterTable(pb.AlterTableRequest(schema_name="readers", table=wide)).success
    second = [SECOND[0], {**SECOND[1], "i": 2**40}]
    b.write(b.auto, wide, second, DELETED)
    ops = b.operations("widened")
    assert "CHANGE COLUMN" in ops and ops.count("WRITE") == 1, ops                                 # in place
    assert served(b.auto.log_path, "widened")[-1].startswith("engine sail"), served(b.auto.log_path, "widened")
    kinds["widened"] = (b.path("widened"), expected_rows(wide.columns, second=second))
    return kinds


@pytest.fixture(scope="module")
def sail_session():
    from pyspark.sql import SparkSession
    from pysail.spark import SparkConnectServer

    server = SparkConnectServer(ip="127.0.0.1", port=0)
    server.start(background=True)
    _, port = server.listening_address
    spark = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").create()
    yield spark
    spark.stop()
    server.stop()


@pytest.fixture(scope="module")
def spark_session(shared_spark):
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(shared_spark.url).create()
    yield spark
    spark.stop()


@pytest.fixture(scope="module")
def kinds(tmp_path_factory, dedicated_server, shared_spark, spark_session, sail_session):
    base = tmp_path_factory.mktemp("readers")
    auto = dedicated_server(base / "wh", base / "auto.log", extra_args=("--spark-remote", shared_spark.url))
    spark_server = dedicated_server(base / "wh", base / "spark.log", engine="spark")
    b = Build(auto, spark_server, spark_session, sail_session, base)
    return build_kinds(b)


@pytest.fixture(scope="module")
def outcomes(kinds, spark_session, sail_session) -> dict[tuple[str, str], str]:
    """(kind, reader) -> the outcome, every cell read once."""
    paths = [p for p, _ in kinds.values()]
    got = {}
    for reader in R.CHILD_READERS:
        answers = R.read_in_child(reader, paths)
        for kind, (path, want) in kinds.items():
            rows, error = answers[path]
            got[kind, reader] = R.outcome(want, rows, error)
    for reader, session in ((R.SPARK, spark_session), (R.SAIL, sail_session)):
        for kind, (path, want) in kinds.items():
            try:
                got[kind, reader] = R.outcome(want, R.canonical_rows(R.spark_rows(session, path)))
            except Exception as e:
                got[kind, reader] = R.outcome(want, None, R.error_text(e))
    return got


# What each kind's protocol is (reader version, writer version, reader features, writer features),
# read from its log: the matrix's rows are named by it.
LEGACY = ["appendOnly", "invariants"]
PROTOCOL = {
    "sail": (1, 2, [], []),
    "sail_dv": (3, 7, ["deletionVectors"], [*LEGACY, "deletionVectors"]),
    "sail_dv_on_spark": (3, 7, ["deletionVectors"], [*LEGACY, "deletionVectors"]),
    "spark": (2, 7, [], [*LEGACY, "columnMapping"]),
    "spark_dv": (3, 7, ["columnMapping", "deletionVectors"], [*LEGACY, "columnMapping", "deletionVectors"]),
    "sail_cm": (3, 7, ["columnMapping"], [*LEGACY, "columnMapping"]),
    "sail_ntz": (3, 7, ["timestampNtz"], [*LEGACY, "timestampNtz"]),
    "spark_ntz": (3, 7, ["columnMapping", "timestampNtz"], [*LEGACY, "columnMapping", "timestampNtz"]),
    "spark_renamed_dropped": (2, 7, [], [*LEGACY, "columnMapping"]),
    "sail_cm_renamed_dropped": (3, 7, ["columnMapping"], [*LEGACY, "columnMapping"]),
    "widened": (3, 7, ["typeWidening"], [*LEGACY, "typeWidening"]),
}
WITH_DELETION_VECTORS = ("sail_dv", "sail_dv_on_spark", "spark_dv")

# The outcome of each cell, in the order of testkit.readers.READERS: "right", or (kind of outcome,
# words its text holds). delta-rs's refusals name the reader feature; DuckDB's delta extension
# (delta-kernel-rs) refuses a reader-2 table whose writer features list columnMapping.
OK = "right"
DV = ("refused", "reader features: {'deletionVectors'} but these are not yet supported by the deltalake reader")
CM = ("refused", "{'columnMapping'} but these are not yet supported by the deltalake reader")
NULLS = ("WRONG", "every value NULL in id, i, s, amount")
POLARS_V2 = ("refused", "delta table requires reader version 2 (column mapping), which polars does not support")
POLARS_CM = ("refused", "delta table requires reader features ['columnMapping'], which polars does not support")
DUCKDB_V2 = ("refused", "Writer features must be Writer-only or also listed in reader features")
TW = ("refused", "reader features: {'typeWidening'} but these are not yet supported by the deltalake reader")
QB_REFUSES_TW = ("refused", "Unsupported table features required: [TypeWidening]")
POLARS_TW = ("refused", "delta table requires reader features ['typeWidening'], which polars does not support")
SPARK_DV = ("refused", "'columnMapping'")  # both reader features named, in either order
#  Spark, to_pyarrow_table, QueryBuilder, to_pandas, pandas via QueryBuilder, read_delta, Polars via QueryBuilder,
#  DuckDB, Sail
EXPECTED = {
    "sail": (OK, OK, OK, OK, OK, OK, OK, OK, OK),
    "sail_dv": (OK, DV, OK, DV, OK, OK, OK, OK, OK),
    "sail_dv_on_spark": (OK, DV, OK, DV, OK, OK, OK, OK, OK),
    "spark": (OK, NULLS, OK, NULLS, OK, POLARS_V2, OK, DUCKDB_V2, OK),
    "spark_dv": (OK, SPARK_DV, OK, SPARK_DV, OK, POLARS_CM, OK, OK, OK),
    "sail_cm": (OK, CM, OK, CM, OK, POLARS_CM, OK, OK, OK),
    "sail_ntz": (OK, OK, OK, OK, OK, OK, OK, OK, OK),
    "spark_ntz": (OK, CM, OK, CM, OK, POLARS_CM, OK, OK, OK),
    "spark_renamed_dropped": (OK, NULLS, OK, NULLS, OK, POLARS_V2, OK, DUCKDB_V2, OK),
    "sail_cm_renamed_dropped": (OK, CM, OK, CM, OK, POLARS_CM, OK, OK, OK),
    "widened": (OK, TW, QB_REFUSES_TW, TW, QB_REFUSES_TW, POLARS_TW, QB_REFUSES_TW, OK, OK),
}
CELLS = [(k, r) for k in EXPECTED for r in R.READERS]


def test_every_kind_is_in_the_matrix():
    assert set(EXPECTED) == set(PROTOCOL) and all(len(v) == len(R.READERS) for v in EXPECTED.values())


def documented_matrix() -> dict[str, list[str]]:
    """docs/readers.md's matrix: kind -> [protocol, one cell per reader] (rows of that many cells)."""
    from testkit.server_process import ROOT

    rows = {}
    for line in (ROOT / "docs" / "readers.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 2 + len(R.READERS):
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_the_documented_matrix_is_the_measured_one():
    """docs/readers.md says what EXPECTED asserts: each cell's kind of outcome, each kind's versions."""
    doc = documented_matrix()
    assert list(doc) == list(EXPECTED)
    for kind, cells in doc.items():
        assert cells[0].split()[:3] == [str(PROTOCOL[kind][0]), "/", str(PROTOCOL[kind][1])], (kind, cells[0])
        said = [c.replace("*", "").split(":")[0].split(" (")[0] for c in cells[1:]]
        assert said == [w if w == OK else w[0] for w in EXPECTED[kind]], (kind, said)


def deletion_vectors(path) -> list[dict]:
    """The deletion vectors the table's commits added (from its log files: delta-rs's add actions
    do not show them)."""
    import glob
    import json

    out = []
    for name in sorted(glob.glob(f"{path}/_delta_log/*.json")):
        with open(name, encoding="utf-8") as f:
            out += [a["add"]["deletionVector"] for a in map(json.loads, filter(str.strip, f))
                    if a.get("add", {}).get("deletionVector")]
    return out


@pytest.mark.parametrize("kind", list(PROTOCOL))
def test_kind_has_its_protocol(kinds, kind):
    from deltalake import DeltaTable

    path, _ = kinds[kind]
    p = DeltaTable(path).protocol()
    want = PROTOCOL[kind]
    assert (p.min_reader_version, p.min_writer_version, sorted(p.reader_features or []),
            sorted(p.writer_features or [])) == (want[0], want[1], sorted(want[2]), sorted(want[3]))
    assert bool(deletion_vectors(path)) == (kind in WITH_DELETION_VECTORS)   # the MERGE marked rows in a vector


@pytest.mark.parametrize("kind,reader", CELLS, ids=[f"{k}-{R.SHORT[r]}" for k, r in CELLS])
def test_reader_reads_kind(outcomes, kind, reader):
    got = outcomes[kind, reader]
    want = EXPECTED[kind][R.READERS.index(reader)]
    if want == OK:
        assert got == OK, got
    else:
        category, words = want
        assert got.startswith(f"{category}: ") and words in got, got
