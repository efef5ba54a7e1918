"""Benchmark workloads: Fivetran-like batch files generated once per (seed, scale) and cached.

The CSV text is built column-wise with pyarrow.compute (no per-row Python) and
streamed straight into `testkit/batch_files.open_sink` (zstd, then AES-256-CBC with the
IV first and PKCS#7 padding), so plaintext never reaches the disk.  Fivetran's
conventions: a header row, fields quoted only when they contain `,` `"` CR or
LF (quotes doubled, no backslash escapes), "\\n" line ends, NULL written as
null_string and unchanged columns of update files as unmodified_string.

Everything is derived from the seed (values, AES keys), so a cache directory
can be deleted and regenerated identically (IVs are random, as Fivetran's are).
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_destination.core.model import Column, DataType as FT, TableSchema
from delta_destination.doors.fivetran.batch_files import Compression, Encryption, FileParams
from testkit import batch_files
from testkit.bench_keys import keyed_rng

GEN_VERSION = 3
NULL_STRING = "null-m8yilkvPsNulehxl2G6pmSQ3G3WWdLP"
UNMOD_STRING = "unmod-NcK9NIjPUutCsz4mjOQQztbnwnE1sY3"
PARAMS = FileParams(Compression.ZSTD, Encryption.AES, NULL_STRING, UNMOD_STRING)

ROWS_PER_FILE = 250_000      # a 250k-row wide file is ~25 MB compressed: well under Fivetran's ~100 MB
ROWS_PER_REQUEST = 1_000_000  # one WriteBatch per 1M rows when loading/appending
CHUNK_ROWS = 50_000           # rows generated and written at once

DAY_MS = 86_400_000
T0_MS = 1_704_067_200_000     # 2024-01-01T00:00:00Z: initial sync
MAX_END = "9999-12-31T23:59:59.999Z"


def sync_ms(step: int) -> int:
    """The `_fivetran_synced` time (ms) of the files of sync number `step` (one a day)."""
    return T0_MS + step * DAY_MS


TRUNCATE_BEFORE_MS = sync_ms(30)  # after every sync time used here: the soft truncate hits every row


# ----------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------

def _c(name, t, pk=False, **kw) -> Column:
    return Column(name, t, pk, **kw)


WIDE = TableSchema("wide", (
    _c("id", FT.LONG, True),
    _c("customer_id", FT.INT),
    _c("quantity", FT.SHORT),
    _c("amount", FT.DECIMAL, precision=18, scale=4),
    _c("price", FT.DOUBLE),
    _c("ratio", FT.FLOAT),
    _c("is_active", FT.BOOLEAN),
    _c("created_date", FT.NAIVE_DATE),
    _c("updated_at", FT.NAIVE_DATETIME),
    _c("event_time", FT.UTC_DATETIME),
    _c("name", FT.STRING),
    _c("email", FT.STRING),
    _c("description", FT.STRING),
    _c("status", FT.STRING),
    _c("payload", FT.JSON),
    _c("blob", FT.BINARY),
    _c("opened_time", FT.NAIVE_TIME),
    _c("counter", FT.LONG),
    _c("_fivetran_deleted", FT.BOOLEAN),
    _c("_fivetran_synced", FT.UTC_DATETIME),
))

NARROW = TableSchema("events", (
    _c("event_id", FT.LONG, True),
    _c("event_type", FT.STRING),
    _c("value", FT.DOUBLE),
    _c("_fivetran_synced", FT.UTC_DATETIME),
))

HISTORY = TableSchema("hist", tuple(c for c in WIDE.columns if c.name != "_fivetran_deleted") + (
    _c("_fivetran_start", FT.UTC_DATETIME, True),
    _c("_fivetran_end", FT.UTC_DATETIME),
    _c("_fivetran_active", FT.BOOLEAN),
))

TABLES = {"wide": WIDE, "events": NARROW, "hist": HISTORY, "growth": TableSchema("growth", WIDE.columns)}

# Columns never NULL / never unmodified in generated files.
_ALWAYS = {"id", "event_id", "_fivetran_synced", "_fivetran_deleted", "_fivetran_start", "_fivetran_end",
           "_fivetran_active"}


# ----------------------------------------------------------------------------
# Value pools and column text
# ----------------------------------------------------------------------------

_WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
          "upsilon phi chi psi omega order invoice customer shipment pending paid refund account region north "
          "south east west priority standard express return warehouse supplier product item total net gross").split()


class Pools:
    """Pre-built strings sampled with take(): realistic cardinality, fast generation."""

    def __init__(self, seed: int):
        rng = np.random.default_rng(seed + 7)
        w = np.array(_WORDS)
        first = w[rng.integers(0, len(w), 50_000)]
        last = w[rng.integers(0, len(w), 50_000)]
        nums = rng.integers(0, 10_000, 50_000)
        self.names = pa.array([f"{a.title()} {b.title()}{n}" for a, b, n in zip(first, last, nums)])
        self.emails = pa.array([f"{a}.{b}{n}@example{n % 97}.com" for a, b, n in zip(first, last, nums)])
        descs = []
        for i in range(20_000):
            k = int(rng.integers(3, 18))
            s = " ".join(w[rng.integers(0, len(w), k)])
            r = rng.random()
            if r < 0.10:
                s = s.replace(" ", ", ", 1)          # a comma: quoted
            elif r < 0.12:
                s = f'{s} "quoted" {s[:10]}'           # quotes: quoted, doubled
            elif r < 0.13:
                s = s.replace(" ", "\n", 1)            # a newline inside a value
            descs.append(s)
        self.descs = pa.array(descs)
        self.status = pa.array(["new", "open", "pending", "shipped", "delivered", "cancelled", "returned"])
        self.types = pa.array([f"evt.{a}.{b}" for a in _WORDS[:20] for b in _WORDS[20:40]])
        self.tags = pa.array(_WORDS)
        self.blobs = pa.array([base64.b64encode(rng.bytes(int(rng.integers(8, 25)))).decode() for _ in range(50_000)])


def _quote_where_needed(arr: pa.Array) -> pa.Array:
    needs = pc.match_substring_regex(arr, r'[,"\r\n]')
    if not pc.any(needs).as_py():
        return arr
    quoted = pc.binary_join_element_wise(pa.scalar('"'), pc.replace_substring(arr, '"', '""'), pa.scalar('"'), "")
    return pc.if_else(needs, quoted, arr)


def _int_text(a: np.ndarray) -> pa.Array:
    return pa.array(a).cast(pa.string())


def _decimal_text(units: np.ndarray, scale: int) -> pa.Array:
    ip = _int_text(np.abs(units) // 10 ** scale)
    fp = pc.utf8_lpad(_int_text(np.abs(units) % 10 ** scale), scale, "0")
    sign = pc.if_else(pa.array(units < 0), pa.scalar("-"), pa.scalar(""))
    return pc.binary_join_element_wise(sign, ip, pa.scalar("."), fp, "")


def _ts_text(ms: np.ndarray, utc: bool) -> pa.Array:
    if utc:
        return pc.strftime(pa.array(ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC")), format="%Y-%m-%dT%H:%M:%SZ")
    return pc.strftime(pa.array(ms // 1000, pa.int64()).cast(pa.timestamp("s")), format="%Y-%m-%dT%H:%M:%S")


def _const(n: int, s: str) -> pa.Array:
    return pa.array(np.full(n, s, dtype=object), pa.string()) if n else pa.array([], pa.string())


def wide_text(pools: Pools, rng: np.random.Generator, ids: np.ndarray, synced_ms: int, *,
              history: Optional[dict] = None) -> dict:
    """CSV text of the wide (or history) table's columns for the given keys."""
    n = len(ids)
    take = lambda pool: pool.take(pa.array(rng.integers(0, len(pool), n)))  # noqa: E731
    out = {
        "id": _int_text(ids),
        "customer_id": _int_text(rng.integers(1, 2_000_000, n, dtype=np.int32)),
        "quantity": _int_text(rng.integers(-100, 30_000, n, dtype=np.int16)),
        "amount": _decimal_text(rng.integers(-10 ** 9, 10 ** 10, n), 4),
        "price": pa.array(np.round(rng.random(n) * 10_000, 2)).cast(pa.string()),
        "ratio": pa.array(rng.random(n).astype(np.float32)).cast(pa.string()),
        "is_active": pa.array(rng.random(n) < 0.5).cast(pa.string()),
        "created_date": pa.array(rng.integers(10_000, 20_000, n).astype(np.int32)).cast(pa.date32()).cast(pa.string()),
        "updated_at": _ts_text(T0_MS - rng.integers(0, 400 * DAY_MS, n), utc=False),
        "event_time": _ts_text(T0_MS - rng.integers(0, 400 * DAY_MS, n), utc=True),
        "name": take(pools.names),
        "email": take(pools.emails),
        "description": _quote_where_needed(take(pools.descs)),
        "status": take(pools.status),
        "payload": _quote_where_needed(pc.binary_join_element_wise(
            pa.scalar('{"ref":'), _int_text(rng.integers(0, 10 ** 9, n)), pa.scalar(',"tags":["'),
            take(pools.tags), pa.scalar('","'), take(pools.tags), pa.scalar('"],"ok":true}'), "")),
        "blob": take(pools.blobs),
        "opened_time": pc.strftime(pa.array(rng.integers(0, 86_400, n), pa.int64()).cast(pa.timestamp("s")),
                                   format="%H:%M:%S"),
        "counter": _int_text(rng.integers(0, 2 ** 62, n, dtype=np.int64)),
        "_fivetran_synced": _ts_text(np.full(n, synced_ms, dtype=np.int64) + rng.integers(0, 1000, n), utc=True),
    }
    if history is None:
        out["_fivetran_deleted"] = _const(n, "false")
    else:
        out["_fivetran_start"] = _ts_text(np.full(n, history["start_ms"], dtype=np.int64), utc=True)
        out["_fivetran_end"] = _const(n, MAX_END)
        out["_fivetran_active"] = _const(n, "true")
    return out


def narrow_text(pools: Pools, rng: np.random.Generator, ids: np.ndarray, synced_ms: int) -> dict:
    n = len(ids)
    return {
        "event_id": _int_text(ids),
        "event_type": pools.types.take(pa.array(rng.integers(0, len(pools.types), n))),
        "value": pa.array(np.round(rng.normal(100, 50, n), 3)).cast(pa.string()),
        "_fivetran_synced": _ts_text(np.full(n, synced_ms, dtype=np.int64) + rng.integers(0, 1000, n), utc=True),
    }


def _markers(cols: dict, rng: np.random.Generator, null_frac: float, unmod_frac: float) -> dict:
    out = {}
    for name, arr in cols.items():
        if name in _ALWAYS and not (unmod_frac and name == "_fivetran_deleted"):
            out[name] = arr
            continue
        n = len(arr)
        if null_frac:
            arr = pc.if_else(pa.array(rng.random(n) < null_frac), pa.scalar(NULL_STRING), arr)
        if unmod_frac:
            arr = pc.if_else(pa.array(rng.random(n) < unmod_frac), pa.scalar(UNMOD_STRING), arr)
        out[name] = arr
    return out


# ----------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------

def write_csv(path: Path, key: bytes, header: list[str], chunks: Iterator[dict]) -> tuple[int, int]:
    """Stream CSV text -> zstd -> AES into `path`. Returns (rows, bytes on disk)."""
    rows = 0
    tmp = path.with_name(path.name + ".part")
    sink = batch_files.open_sink(tmp, key, Compression.ZSTD)
    try:
        sink.write((",".join(header) + "\n").encode())
        for cols in chunks:
            line = pc.binary_join_element_wise(*[cols[h] for h in header], ",")
            line = pc.binary_join_element_wise(line, pa.scalar(""), "\n")  # "<row>\n"
            offsets = np.frombuffer(line.buffers()[1], dtype=np.int32)
            start, end = int(offsets[line.offset]), int(offsets[line.offset + len(line)])
            sink.write(memoryview(line.buffers()[2])[start:end])
            rows += len(line)
    finally:
        sink.close()
    os.replace(tmp, path)
    return rows, path.stat().st_size


@dataclass
class FileSpec:
    path: str
    key: str  # hex
    rows: int
    bytes: int
    kind: str  # replace | update | delete | earliest

    def key_bytes(self) -> bytes:
        return bytes.fromhex(self.key)


class Generator:
    def __init__(self, root: Path, seed: int, scale: float):
        self.seed = seed
        self.scale = scale
        self.dir = root / f"seed{seed}-scale{scale:g}"
        self.pools: Optional[Pools] = None
        self.manifest_path = self.dir / "manifest.json"
        self.files: dict[str, list[dict]] = {}
        self.meta: dict = {}
        if self.manifest_path.exists():
            m = json.loads(self.manifest_path.read_text())
            if m.get("version") == GEN_VERSION:
                self.files = m["files"]
                self.meta = m.get("meta", {})

    def n(self, rows: int) -> int:
        return max(10, int(round(rows * self.scale)))

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": GEN_VERSION, "seed": self.seed, "scale": self.scale,
                                   "null_string": NULL_STRING, "unmodified_string": UNMOD_STRING,
                                   "files": self.files, "meta": self.meta}, indent=1))
        os.replace(tmp, self.manifest_path)

    def _rng(self, name: str, part: int = 0) -> np.random.Generator:
        return keyed_rng(self.seed, name, part)

    def group(self, name: str, build) -> list[FileSpec]:
        """The files of one named group, generated on first use (build(gen) -> list of dict specs)."""
        if name not in self.files:
            if self.pools is None:
                self.pools = Pools(self.seed)
            t = time.monotonic()
            (self.dir / name).mkdir(parents=True, exist_ok=True)
            specs = build()
            self.files[name] = [s.__dict__ for s in specs]
            self.meta[name] = {"generate_s": round(time.monotonic() - t, 2)}
            self._save()
            print(f"  generated {name}: {sum(s.rows for s in specs):,} rows in {len(specs)} files, "
                  f"{sum(s.bytes for s in specs) / 1e6:.1f} MB, {time.monotonic() - t:.1f}s", flush=True)
        return [FileSpec(**d) for d in self.files[name]]

    def _file(self, group: str, idx: int, kind: str, header: list[str], chunks) -> FileSpec:
        key = self._rng(group, 10_000 + idx).bytes(32)
        path = self.dir / group / f"{kind}_{idx:03d}.csv.zst.aes"
        rows, size = write_csv(path, key, header, chunks)
        return FileSpec(str(path.resolve()), key.hex(), rows, size, kind)

    def _split(self, group: str, kind: str, ids: np.ndarray, header: list[str], text_fn,
               rows_per_file: int = ROWS_PER_FILE) -> list[FileSpec]:
        """Write `ids` as files of rows_per_file rows (scaled), generated CHUNK_ROWS at a time."""
        specs = []
        per_file = max(1000, self.n(rows_per_file))
        for fi, fstart in enumerate(range(0, len(ids), per_file)):
            fids = ids[fstart:fstart + per_file]

            def chunks(fids=fids, fi=fi):
                for ci, cstart in enumerate(range(0, len(fids), CHUNK_ROWS)):
                    rng = self._rng(group, fi * 1000 + ci)
                    yield text_fn(rng, fids[cstart:cstart + CHUNK_ROWS])

            specs.append(self._file(group, fi, kind, header, chunks()))
        return specs

    # ---- the workloads' files -------------------------------------------------------------
    def wide_rows(self, group: str, ids: np.ndarray, sync_step: int, *, kind="replace", unmod_frac=0.0,
                  table: TableSchema = WIDE, history: Optional[dict] = None) -> list[FileSpec]:
        header = self._header(group, table)

        def text(rng, chunk_ids):
            cols = wide_text(self.pools, rng, chunk_ids, sync_ms(sync_step), history=history)
            return _markers(cols, rng, 0.03, unmod_frac)

        return self.group(group, lambda: self._split(group, kind, ids, header, text))

    def _header(self, group: str, table: TableSchema) -> list[str]:
        # Fivetran gives no column order guarantee: shuffle it (deterministically).
        header = table.column_names
        order = self._rng(group, 99).permutation(len(header))
        return [header[i] for i in order]

    def keys_only(self, group: str, ids: np.ndarray, sync_step: int, kind: str, extra: dict) -> list[FileSpec]:
        """Delete / earliest-start files: the key column(s) plus fixed-value columns."""
        def text(rng, chunk_ids):
            n = len(chunk_ids)
            cols = {"id": _int_text(chunk_ids)}
            for name, value in extra.items():
                cols[name] = _ts_text(np.full(n, value, dtype=np.int64), utc=True) if isinstance(value, int) else _const(n, value)
            return cols

        header = ["id", *extra]
        return self.group(group, lambda: self._split(group, kind, ids, header, text))

    def narrow_rows(self, group: str, ids: np.ndarray, sync_step: int) -> list[FileSpec]:
        header = self._header(group, NARROW)

        def text(rng, chunk_ids):
            return _markers(narrow_text(self.pools, rng, chunk_ids, sync_ms(sync_step)), rng, 0.01, 0.0)

        return self.group(group, lambda: self._split(group, "replace", ids, header, text, rows_per_file=1_000_000))


def chunked(specs: list[FileSpec], rows_per_request: int) -> list[list[FileSpec]]:
    """Group files into requests of about rows_per_request rows."""
    out, cur, n = [], [], 0
    for s in specs:
        cur.append(s)
        n += s.rows
        if n >= rows_per_request:
            out.append(cur)
            cur, n = [], 0
    if cur:
        out.append(cur)
    return out


def clear_cache(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
