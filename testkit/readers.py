"""Read one Delta table with each reader teams use, and say how it read it: right, refused, or WRONG.

What a reader answers for a table depends on the table's protocol features (column mapping,
deletion vectors, type widening, timestampNtz), and some readers answer wrong values without an
error (delta-rs's `to_pyarrow_table` on a column-mapped table: every value NULL), so the readers
matrix (docs/readers.md, tests/engines/test_readers_matrix.py) reads every kind of table the
destination writes with each of them and compares the rows with the rows written.

The Python readers (delta-rs and what is built on it, Polars, DuckDB) run in a child process per
reader (`python -m testkit.readers READER PATH...`, one JSON line per table): delta-rs's
`to_pyarrow_table` was seen to abort the interpreter at exit ("terminate called without an active
exception"), which must not be the test process; a child that dies is an error of its cells. Apache Spark + Delta and Sail are read over
Spark Connect (`spark_rows`). Values are compared in one canonical form (`canonical`), so that
readers that hand the same value in another Python type (pandas' NaN for a NULL integer, its
Timestamp, Polars' datetimes) compare equal, and nothing else does.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable, Optional

# The readers of the matrix, in the order of its columns.
SPARK = "Apache Spark + Delta 4.4"
PYARROW = "delta-rs to_pyarrow_table"
QUERY_BUILDER = "delta-rs QueryBuilder"
PANDAS = "pandas (delta-rs to_pandas)"
POLARS = "Polars read_delta"
DUCKDB = "DuckDB delta_scan"
SAIL = "Sail 0.7.2"
# What docs/readers.md tells pandas and Polars users to read with: delta-rs's query engine, then Arrow.
PANDAS_QB = "pandas (QueryBuilder, then to_pandas)"
POLARS_QB = "Polars (QueryBuilder, then pl.from_arrow)"
READERS = (SPARK, PYARROW, QUERY_BUILDER, PANDAS, PANDAS_QB, POLARS, POLARS_QB, DUCKDB, SAIL)
CHILD_READERS = (PYARROW, QUERY_BUILDER, PANDAS, PANDAS_QB, POLARS, POLARS_QB, DUCKDB)
# Short names: the child's command line, test ids.
CODES = {PYARROW: "pyarrow", QUERY_BUILDER: "querybuilder", PANDAS: "pandas", PANDAS_QB: "pandas_qb", POLARS: "polars",
         POLARS_QB: "polars_qb", DUCKDB: "duckdb"}
SHORT = {SPARK: "spark", SAIL: "sail", **CODES}
# The DuckDB release whose signed `delta` extension the test extras install from PyPI (duckdb-ext-delta):
# DuckDB downloads its extensions from its own site, which this machine does not reach.
DUCKDB_EXTENSION = "duckdb_ext/extensions/v{version}/linux_amd64/delta.duckdb_extension"


def canonical(value: Any) -> Any:
    """One JSON-able form per value, whatever Python type a reader hands it in.
    >>> canonical(Decimal("1.5000")), canonical(Decimal("100")), canonical(float("nan")), canonical(b"\\x01")
    ('dec:1.5', 'dec:100', None, 'bin:01')
    >>> canonical(dt.datetime(2024, 1, 1, 11, tzinfo=dt.timezone(dt.timedelta(hours=1)))), canonical(dt.datetime(2024, 1, 1))
    ('ts:2024-01-01T10:00:00Z', 'ntz:2024-01-01T00:00:00')
    >>> canonical(dt.date(1, 1, 1)), canonical(True), canonical(2.0)
    ('date:0001-01-01', True, 2.0)
    """
    if value is None:
        return None
    if type(value).__name__ in ("NaTType",):
        return None
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    if isinstance(value, Decimal):
        return "dec:" + format(value.normalize(), "f")
    if isinstance(value, dt.datetime):
        if hasattr(value, "to_pydatetime"):      # pandas' Timestamp
            value = value.to_pydatetime()
        if value.tzinfo is not None:
            return "ts:" + value.astimezone(dt.timezone.utc).replace(tzinfo=None).isoformat() + "Z"
        return "ntz:" + value.isoformat()
    if isinstance(value, dt.date):
        return "date:" + value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bin:" + bytes(value).hex()
    if isinstance(value, str):
        return value
    if isinstance(value, float) or type(value).__name__.startswith("float"):
        return None if math.isnan(float(value)) else float(value)
    if isinstance(value, int) or type(value).__name__.startswith(("int", "uint")):
        return int(value)
    raise TypeError(f"no canonical form for a {type(value).__name__}")


def canonical_rows(rows: Iterable[dict], key: str = "id") -> list[dict]:
    """The rows in canonical form, sorted by `key` (rows without it last)."""
    out = [{k: canonical(v) for k, v in r.items()} for r in rows]
    return sorted(out, key=lambda r: (r.get(key) is None, str(r.get(key))))


def error_text(e: BaseException) -> str:
    """An error as the matrix quotes it: its type and first line, shortened."""
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:300]}"


def outcome(expected: list[dict], got: Optional[list[dict]], error: Optional[str] = None) -> str:
    """'right', 'refused: <error>' or 'WRONG: <how>' (both sides canonical and sorted).
    >>> want = [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]
    >>> outcome(want, want), outcome(want, None, "E: no"), outcome(want, [{"id": 1, "v": None}, {"id": 2, "v": None}])
    ('right', 'refused: E: no', 'WRONG: every value NULL in v')
    >>> outcome(want, [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}])
    'WRONG: 3 rows instead of 2'
    >>> outcome(want, [{"id": 1}, {"id": 2}])
    'WRONG: columns missing: v'
    """
    if error is not None:
        return f"refused: {error}"
    if got == expected:
        return "right"
    want_cols = list(expected[0]) if expected else []
    got_cols = list(got[0]) if got else []
    problems = []
    if set(want_cols) - set(got_cols):
        problems.append("columns missing: " + ", ".join(c for c in want_cols if c not in got_cols))
    if set(got_cols) - set(want_cols):
        problems.append("columns extra: " + ", ".join(c for c in got_cols if c not in want_cols))
    if len(got) != len(expected):
        problems.append(f"{len(got)} rows instead of {len(expected)}")
    if not problems:
        nulls = [c for c in want_cols if all(r[c] is None for r in got) and any(r[c] is not None for r in expected)]
        if nulls:
            problems.append("every value NULL in " + ", ".join(nulls))
        differ = [c for c in want_cols if c not in nulls and [r[c] for r in got] != [r[c] for r in expected]]
        if differ:
            problems.append("values differ in " + ", ".join(differ))
    return "WRONG: " + "; ".join(problems or ["rows differ"])


# ---- the readers -------------------------------------------------------------------------------

def query_builder_arrow(path: str):
    """The whole table through delta-rs's query engine, as a pyarrow Table."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    return pa.table(QueryBuilder().register("t", DeltaTable(path)).execute("SELECT * FROM t").read_all())


def _read(code: str, path: str) -> list[dict]:
    if code == "pyarrow":
        from deltalake import DeltaTable

        return DeltaTable(path).to_pyarrow_table().to_pylist()
    if code == "querybuilder":
        return query_builder_arrow(path).to_pylist()
    if code == "pandas_qb":
        return query_builder_arrow(path).to_pandas().to_dict("records")
    if code == "polars_qb":
        import polars as pl

        return pl.from_arrow(query_builder_arrow(path)).to_dicts()
    if code == "pandas":
        from deltalake import DeltaTable

        return DeltaTable(path).to_pandas().to_dict("records")
    if code == "polars":
        import polars as pl

        return pl.read_delta(path).to_dicts()
    if code == "duckdb":
        import duckdb

        con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
        con.execute(f"LOAD '{duckdb_extension()}'")
        return con.execute("SELECT * FROM delta_scan(?)", [path]).fetch_arrow_table().to_pylist()
    raise ValueError(f"unknown reader {code}")


def duckdb_extension() -> str:
    """The path of the signed DuckDB `delta` extension that duckdb-ext-delta installs for this DuckDB."""
    import importlib.util

    import duckdb

    spec = importlib.util.find_spec("duckdb_ext")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("duckdb-ext-delta is not installed (the test extras install it)")
    root = Path(list(spec.submodule_search_locations)[0]).parent
    return str(root / DUCKDB_EXTENSION.format(version=duckdb.__version__))


def read_in_child(reader: str, paths: list[str], timeout: float = 300) -> dict[str, tuple[Optional[list[dict]], Optional[str]]]:
    """Each table read by `reader` (one of CHILD_READERS) in a child process: path -> (canonical rows
    or None, error text or None). A table the child did not answer (it died) is an error naming how."""
    proc = subprocess.run([sys.executable, "-m", "testkit.readers", CODES[reader], *paths],
                          capture_output=True, text=True, timeout=timeout, cwd=Path(__file__).resolve().parents[1])
    answers = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            a = json.loads(line)
            answers[a["path"]] = (a.get("rows"), a.get("error"))
    for p in paths:
        if p not in answers:
            tail = proc.stderr.strip().splitlines()[-1:] or [""]
            answers[p] = (None, f"the reader's process died (exit {proc.returncode}): {tail[0][:200]}")
    return answers


def spark_rows(spark, path: str) -> list[dict]:
    """The table as a Spark Connect engine (Apache Spark + Delta, or Sail) reads it, through Arrow."""
    return spark.read.format("delta").load(path).toArrow().to_pylist()


def main(argv: list[str]) -> None:
    code, paths = argv[0], argv[1:]
    for p in paths:
        try:
            answer = {"path": p, "rows": canonical_rows(_read(code, p))}
        except Exception as e:  # the matrix records every refusal as it is worded
            answer = {"path": p, "error": error_text(e)}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
