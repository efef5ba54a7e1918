"""The bare baseline: the same batch files applied with no gRPC and no Spark.

Each file is read with the bare libraries (`cryptography` and `zstandard` as bench/common/floor.py does,
`pyarrow.csv` on its own threads with the table's types, `pyarrow.compute` for unmodified markers:
nothing of the destination's reader, whose cost shows as a step of the server's profile), then delta-rs
(`deltalake`) writes or merges into a separate Delta table:

| workload        | delta-rs call                                                                  |
|-----------------|--------------------------------------------------------------------------------|
| load (empty)    | `write_deltalake(mode="append")` (one commit per request)                      |
| upsert          | `merge(t.id = s.id).when_matched_update_all().when_not_matched_insert_all()`  |
| partial update  | `merge(...).when_matched_update({c: CASE WHEN s.u_c THEN t.c ELSE s.c END})` |
| hard delete     | `merge(...).when_matched_delete()`                                             |
| soft truncate   | `update({deleted: true}, synced < cut AND deleted is not true)`               |
| history         | `merge(t.id = s.id)`: delete versions with start >= s.start, close the active |
|                 | one (end = start - 1 ms, active = false); then `write_deltalake(append)` of   |
|                 | the new versions (two commits where the server makes one)                     |

It runs in its own process (so its peak RSS can be sampled like the server's,
and so delta-rs's occasional abort at interpreter exit cannot hurt the driver),
driven over a multiprocessing pipe by bench/growth/runner.py through `BaselineProc`.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from typing import Optional


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class Baseline:
    def __init__(self):
        import pyarrow as pa  # noqa: F401

        from .data import PARAMS, TABLES

        self.params = PARAMS
        self.tables = TABLES

    # ---- reading --------------------------------------------------------------------------
    def _read(self, table_name: str, files: list, allow_unmodified: bool = False):
        """All files of one request -> (values Table, unmodified Table or None), with the bare
        libraries (floor.plaintext: cryptography + zstandard; pyarrow.csv on its own threads;
        pyarrow.compute for the unmodified markers): nothing of the destination's own reader, whose
        cost is a step of the server's profile instead of hiding on both sides of the ratio."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pv

        from delta_destination.core.types import arrow_type

        from .floor import plaintext

        types = {c.name: arrow_type(c) for c in self.tables[table_name].columns}
        # BINARY cells are base64 text in Fivetran's CSV: read as text, decoded by the standard library.
        binary = {c for c, t in types.items() if pa.types.is_binary(t)}
        text_types = {c: (pa.string() if c in binary else t) for c, t in types.items()}

        def decoded(table: pa.Table) -> pa.Table:
            import base64

            for c in binary & set(table.column_names):
                col = pa.array([None if v is None else base64.b64decode(v) for v in table.column(c).to_pylist()],
                               pa.binary())
                table = table.set_column(table.column_names.index(c), c, col)
            return table
        parse = pv.ParseOptions(newlines_in_values=True)
        vals, unmods = [], []
        for f in files:
            data = pa.py_buffer(plaintext(f["path"], bytes.fromhex(f["key"])))
            if not allow_unmodified:
                vals.append(decoded(pv.read_csv(data, parse_options=parse, convert_options=pv.ConvertOptions(
                    column_types=text_types, null_values=[self.params.null_string], strings_can_be_null=True))))
                continue
            # Update files: every column read as text, the marker found, then the table's types.
            raw = pv.read_csv(data, parse_options=parse, convert_options=pv.ConvertOptions(
                column_types={c: pa.string() for c in types}, null_values=[self.params.null_string],
                strings_can_be_null=True))
            marked = {c: pc.fill_null(pc.equal(raw.column(c), self.params.unmodified_string), False)
                      for c in raw.column_names}
            vals.append(decoded(pa.table({c: pc.if_else(marked[c], pa.scalar(None, pa.string()), raw.column(c))
                                          .cast(text_types[c]) for c in raw.column_names})))
            unmods.append(pa.table(marked))
        values = pa.concat_tables(vals, promote_options="default")
        return values, (pa.concat_tables(unmods, promote_options="default") if allow_unmodified else None)

    def _arrow_schema(self, table_name: str):
        import pyarrow as pa

        from delta_destination.core.types import arrow_type

        return pa.schema([pa.field(c.name, arrow_type(c)) for c in self.tables[table_name].columns])

    def _conform(self, table_name: str, values):
        """Full rows in table column order (absent columns NULL), as the table's Arrow types."""
        import pyarrow as pa

        schema = self._arrow_schema(table_name)
        cols = [values.column(f.name).cast(f.type) if f.name in values.column_names else pa.nulls(values.num_rows, f.type)
                for f in schema]
        return pa.Table.from_arrays(cols, schema=schema)

    # ---- commands -------------------------------------------------------------------------
    def create(self, path: str, table: str) -> dict:
        from deltalake import DeltaTable

        DeltaTable.create(path, self._arrow_schema(table), mode="error")
        return {}

    def load(self, path: str, table: str, files: list) -> dict:
        """Rows into a table where their keys are new: a plain append."""
        from deltalake import write_deltalake

        t = time.perf_counter()
        values, _ = self._read(table, files)
        r = time.perf_counter()
        write_deltalake(path, self._conform(table, values), mode="append")
        return {"rows": values.num_rows, "read_s": r - t, "write_s": time.perf_counter() - r}

    def _merger(self, path: str, source, keys: list[str]):
        from deltalake import DeltaTable

        on = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in keys)
        return DeltaTable(path).merge(source, predicate=on, source_alias="s", target_alias="t")

    def upsert(self, path: str, table: str, files: list) -> dict:
        t = time.perf_counter()
        values, _ = self._read(table, files)
        r = time.perf_counter()
        src = self._conform(table, values)
        keys = self.tables[table].primary_keys
        m = self._merger(path, src, keys).when_matched_update_all().when_not_matched_insert_all().execute()
        return {"rows": values.num_rows, "read_s": r - t, "write_s": time.perf_counter() - r, "metrics": _small(m)}

    def update(self, path: str, table: str, files: list) -> dict:
        """Partial updates: unmodified cells keep the stored value; missing keys are ignored."""
        import pyarrow as pa

        t = time.perf_counter()
        values, unmod = self._read(table, files, allow_unmodified=True)
        r = time.perf_counter()
        keys = self.tables[table].primary_keys
        cols, names, updates = [], [], {}
        for c in values.column_names:
            cols.append(values.column(c))
            names.append(c)
            if c in keys:
                continue
            flag = f"__u_{c}"
            cols.append(unmod.column(c).fill_null(False))
            names.append(flag)
            updates[_q(c)] = f"CASE WHEN s.{_q(flag)} THEN t.{_q(c)} ELSE s.{_q(c)} END"
        src = pa.Table.from_arrays(cols, names=names)
        m = self._merger(path, src, keys).when_matched_update(updates=updates).execute()
        return {"rows": values.num_rows, "read_s": r - t, "write_s": time.perf_counter() - r, "metrics": _small(m)}

    def delete(self, path: str, table: str, files: list) -> dict:
        t = time.perf_counter()
        values, _ = self._read(table, files)
        r = time.perf_counter()
        keys = self.tables[table].primary_keys
        m = self._merger(path, values.select(keys), keys).when_matched_delete().execute()
        return {"rows": values.num_rows, "read_s": r - t, "write_s": time.perf_counter() - r, "metrics": _small(m)}

    def soft_truncate(self, path: str, before_iso: str, synced: str, deleted: str) -> dict:
        from deltalake import DeltaTable

        t = time.perf_counter()
        d = _q(deleted)
        m = DeltaTable(path).update(updates={d: "true"},
                                    predicate=f"{_q(synced)} < '{before_iso}' AND ({d} IS NULL OR {d} = false)")
        return {"rows": m.get("num_updated_rows", 0), "read_s": 0.0, "write_s": time.perf_counter() - t,
                "metrics": _small(m)}

    def history(self, path: str, table: str, earliest: list, replace: list) -> dict:
        """earliest_start: delete versions at/after it and close the active one; then insert the versions."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from deltalake import write_deltalake

        t = time.perf_counter()
        e_values, _ = self._read(table, earliest)
        v_values, _ = self._read(table, replace)
        r = time.perf_counter()
        keys = [k for k in self.tables[table].primary_keys if k != "_fivetran_start"]
        start = e_values.column("_fivetran_start")
        close_end = pc.cast(pc.subtract(pc.cast(start, pa.int64()), 1000), pa.int64()).cast(start.type)
        src = e_values.select(keys + ["_fivetran_start"]).append_column("__close_end", close_end)
        m = (self._merger(path, src, keys)
             .when_matched_delete(predicate=f"t.{_q('_fivetran_start')} >= s.{_q('_fivetran_start')}")
             .when_matched_update(predicate=f"t.{_q('_fivetran_active')} = true",
                                  updates={_q("_fivetran_active"): "false", _q("_fivetran_end"): f"s.{_q('__close_end')}"})
             .execute())
        write_deltalake(path, self._conform(table, v_values), mode="append")
        return {"rows": v_values.num_rows, "read_s": r - t, "write_s": time.perf_counter() - r, "metrics": _small(m)}

    def count(self, path: str, storage_options: Optional[dict] = None) -> dict:
        """Live rows. From the files' statistics, except on tables with deletion vectors (the Spark
        engine's MERGE/UPDATE/DELETE): there a file's num_records still counts the rows its deletion
        vector removed, so the rows are counted by a query."""
        import pyarrow as pa
        from deltalake import DeltaTable, QueryBuilder

        dt = DeltaTable(path, storage_options=storage_options)
        n = pa.table(dt.get_add_actions(flatten=True)).column("num_records").to_pylist()
        if "deletionVectors" in (dt.protocol().reader_features or []):
            got = QueryBuilder().register("t", dt).execute("SELECT count(*) AS n FROM t").read_all()
            return {"rows": int(got.column(0)[0].as_py()), "files": len(n)}
        return {"rows": int(sum(x or 0 for x in n)), "files": len(n)}

    def compare(self, a: str, b: str, table: str) -> dict:
        """Full comparison of two Delta tables (sorted by primary key); for small runs."""
        from testkit.delta_read import read_delta_table

        keys = self.tables[table].primary_keys
        ta, tb = read_delta_table(a), read_delta_table(b)
        names = self.tables[table].column_names
        ta = ta.select(names).sort_by([(k, "ascending") for k in keys])
        tb = tb.select(names).sort_by([(k, "ascending") for k in keys])
        if ta.num_rows != tb.num_rows:
            return {"equal": False, "why": f"{ta.num_rows} vs {tb.num_rows} rows"}
        bad = [n for n in names if not ta.column(n).cast(tb.schema.field(n).type).equals(tb.column(n))]
        return {"equal": not bad, "why": f"columns differ: {bad}" if bad else ""}


def _small(m) -> dict:
    return {k: v for k, v in (m or {}).items() if isinstance(v, (int, float))}


def worker(conn) -> None:
    """multiprocessing entry point: (command, kwargs) in, ("ok", result) / ("err", text) out."""
    b = Baseline()
    while True:
        msg = conn.recv()
        if msg is None:
            break
        cmd, kwargs = msg
        t = time.perf_counter()
        try:
            res = getattr(b, cmd)(**kwargs)
            res["seconds"] = time.perf_counter() - t
            conn.send(("ok", res))
        except Exception:  # noqa: BLE001
            conn.send(("err", traceback.format_exc(limit=8)))
    conn.close()
    os._exit(0)  # skip interpreter teardown: deltalake 1.6.6 sometimes aborts there


class BaselineFailed(Exception):
    """A baseline command raised in the worker (the message holds its traceback)."""


def file_refs(specs) -> list[dict]:
    """data.FileSpec -> what the worker's commands take (path and hex key)."""
    return [{"path": s.path, "key": s.key} for s in specs]


class BaselineProc:
    """The baseline worker process and the driver's end of its pipe."""

    def __init__(self):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker, args=(child,), name="bench-baseline", daemon=True)
        self.proc.start()
        child.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def call(self, cmd: str, **kwargs) -> dict:
        """Run one Baseline method in the worker; its result, plus "seconds" it took there."""
        self.conn.send((cmd, kwargs))
        status, res = self.conn.recv()
        if status != "ok":
            raise BaselineFailed(f"baseline {cmd} failed:\n{res}")
        return res

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(10)
