"""Secrets and plaintext (issue 5, part 4).

(a) No decrypted batch data is written anywhere but the Delta table: while a
    large WriteBatch runs, /tmp, the server's cwd, its TMPDIR and the warehouse
    are polled and every new or changed file is scanned (raw, and decompressed
    when it is zstd/gzip) for a marker planted in every row; the server's open
    files are polled too (anything opened for writing). Files created inside the
    table directory must be Parquet data files or Delta log entries.
    The known exception: batches above LOCAL_RELATION_LIMIT (64 MiB of Arrow)
    are staged under `<warehouse>/_fivetran_staging/<uuid>` (Sail: a Delta table; Spark:
    Parquet files, or a Delta table on an object-store warehouse);
    it must be gone after the batch, and after a crash at the next start-up.
(b) Keys (raw, hex, base64), a configuration secret and planted customer values
    never appear in the server log (stdout + stderr, Sail's included) or in any
    error message: wrong key, short key, missing key, bad value, unknown column,
    an engine error whose own message quotes the value, an unreachable engine
    URL carrying a token.
"""
from __future__ import annotations

import base64
import datetime as dt
import gzip
import os
import re
import threading
import time
import uuid
from pathlib import Path

import grpc
import psutil
import pytest
import zstandard

from testkit.batch_files import new_key, write_batch_file
from testkit.fivetran_requests import NULL_STRING, UNMOD_STRING, batch_file, col, table, write_request
from testkit.server_process import ROOT, RunningServer
from testkit.delta_read import delta_version, read_delta_table
from testkit.polling import Poller
from testkit.processes import process_tree
from delta_destination.doors.fivetran._proto import common_pb2, destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.batch_files import Compression

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
SCHEMA = "sec"

BIG = table("big", col("id", "LONG", pk=True), col("payload", "STRING"), col("n", "LONG"),
            col("_fivetran_synced", "UTC_DATETIME"), col("_fivetran_deleted", "BOOLEAN"))

# Inside a table directory only these may appear (paths relative to the table). The engine's
# object store writes a file as `<name>#<n>` and renames it when complete, hence the optional suffix.
TABLE_FILE_OK = [
    r"[^/]+\.parquet",                                   # data files (no partitioning)
    r"_delta_log/\d{20}\.json",                          # commits
    r"_delta_log/\d{20}\.crc",                           # commit checksums
    r"_delta_log/\d{20}\.checkpoint(\.\d+\.\d+)?\.parquet",
    r"_delta_log/_last_checkpoint",
]
SKIP_DIRS = {".venv", ".git", "__pycache__", "node_modules"}


def _big_rows_file(dir_: Path, marker: str, n: int, width: int = 100):
    """n rows, each with the marker in its payload (pre-formatted for speed): (path, key)."""
    key = new_key()
    path = dir_ / f"big_{uuid.uuid4().hex[:8]}.csv.zst.aes"
    pad = "x" * width
    synced = "2024-05-01T12:00:00Z"
    rows = ([str(i), f"{marker}-{i}-{pad}", str(i * 7), synced, "false"] for i in range(n))
    write_batch_file(path, ["id", "payload", "n", "_fivetran_synced", "_fivetran_deleted"], rows, key=key,
                     compression=Compression.ZSTD, null_string=NULL_STRING, unmodified_string=UNMOD_STRING)
    return str(path), key


def _decoded_views(data: bytes):
    yield data
    try:
        if data[:4] == b"\x28\xb5\x2f\xfd":
            yield zstandard.ZstdDecompressor().decompressobj().decompress(data)
        elif data[:2] == b"\x1f\x8b":
            yield gzip.decompress(data)
    except Exception:  # noqa: BLE001 - a partial or foreign file: the raw bytes were scanned already
        pass


class Watcher(Poller):
    """Polls directory trees and the server's open files while a request runs.

    Two threads: quick looks (the server's open files and its private `quick_roots`, every 50 ms)
    and walks of the shared `roots` (/tmp, the checkout), which take seconds when other test
    sessions fill /tmp. A slow walk used to hold up the quick looks too, so a batch could end
    after one look (CI, 2026-11-28); the quick looks are what `polls` counts."""

    def __init__(self, roots: dict[str, Path], marker: bytes, server_pid: int, table_dirs: list[Path],
                 staging: Path | None = None, quick_roots: tuple[str, ...] = ("TMPDIR", "warehouse")):
        self.roots = {k: Path(v) for k, v in roots.items()}
        self.quick = {k: v for k, v in self.roots.items() if k in quick_roots}
        self.slow = {k: v for k, v in self.roots.items() if k not in quick_roots}
        self.marker = marker
        self.pid = server_pid
        self.table_dirs = [Path(t) for t in table_dirs]
        self.staging = staging
        self.seen: dict[str, tuple] = {}
        self.baseline = self._stat_all()
        self.hits: list[str] = []             # files outside the tables holding the marker
        self.new_outside: dict[str, list] = {k: [] for k in self.roots}  # new files per root (outside tables)
        self.table_files: set[str] = set()    # relative paths seen inside table dirs
        self.written: set[str] = set()        # paths the server had open for writing
        self.staging_seen = False
        self.polls = 0                        # quick looks
        self.walks = 0                        # walks of the shared roots
        self.scanned_files = 0
        self.scanned_bytes = 0
        self._walker = _Walker(self) if self.slow else None
        super().__init__(0.05)

    def _walk(self, root: Path):
        for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: None):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not self._elsewhere(dirpath, d)]
            for f in filenames:
                yield os.path.join(dirpath, f)

    def _elsewhere(self, parent: str, name: str) -> bool:
        """Folders of other test sessions and processes, which this server does not write (other
        pytest sessions' base folders and S3 servers, other processes' engine scratch folders): the
        full tier runs on several workers beside the client tier, and scanning their churn made a
        poll take seconds. This test's own folders are roots of their own."""
        if parent == "/tmp" and (name.startswith(("pytest-of-", "s3server-")) or name.startswith("seaweedfs")):
            return True
        if os.path.basename(parent).startswith("delta-destination-") and name.startswith("spark-"):
            return not name.startswith(f"spark-{self.pid}-")
        return False

    def _stat_all(self) -> dict:
        out = {}
        for root in self.roots.values():
            for p in self._walk(root):
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                out[p] = (st.st_size, st.st_mtime_ns)
        return out

    def _in_table(self, p: str):
        for t in self.table_dirs:
            if p.startswith(str(t) + os.sep):
                return t
        return None

    def _scan(self, roots: dict[str, Path]):
        for name, root in roots.items():
            for p in self._walk(root):
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                sig = (st.st_size, st.st_mtime_ns)
                if self.baseline.get(p) == sig or self.seen.get(p) == sig:
                    continue
                first = p not in self.seen
                self.seen[p] = sig
                t = self._in_table(p)
                if t is not None:
                    self.table_files.add(os.path.relpath(p, t))
                    continue
                if self.staging is not None and p.startswith(str(self.staging) + os.sep):
                    self.staging_seen = True
                    continue
                if first and p not in self.baseline:
                    self.new_outside[name].append(p)
                if not os.path.isfile(p) or os.path.islink(p):
                    continue
                try:
                    with open(p, "rb") as f:
                        data = f.read(256 << 20)
                except OSError:
                    continue
                self.scanned_files += 1
                self.scanned_bytes += len(data)
                if any(self.marker in view for view in _decoded_views(data)):
                    self.hits.append(p)

    def _open_files(self):
        try:
            for q in process_tree(self.pid):
                for of in q.open_files():
                    if of.mode != "r":
                        self.written.add(of.path)
        except psutil.Error:
            pass

    def poll(self):
        self.polls += 1
        self._open_files()
        self._scan(self.quick)

    def walk(self):
        self.walks += 1
        self._scan(self.slow)

    def __enter__(self):
        if self._walker is not None:
            self._walker.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        if self._walker is not None:
            self._walker.__exit__(*exc)
        self._open_files()
        self._scan(self.roots)  # a last look at the final state


class _Walker(Poller):
    """The Watcher's second thread: walks the shared roots, as often as a walk allows."""

    def __init__(self, watcher: Watcher):
        self.watcher = watcher
        super().__init__(0.05)

    def poll(self):
        self.watcher.walk()


def _server(start, base: Path, engine: str | None = None, own_jvm: bool = False, **env) -> RunningServer:
    tmpdir = base / "server-tmp"
    tmpdir.mkdir(parents=True, exist_ok=True)
    return start(base / "warehouse", base / "server.log", env={"TMPDIR": str(tmpdir), **env}, engine=engine, own_jvm=own_jvm)


def _create(stub, t, schema=SCHEMA, configuration=None):
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=t, configuration=configuration or {})).success


def _run_in_thread(fn):
    out = {}

    def go():
        try:
            out["result"] = fn()
        except Exception as exc:  # noqa: BLE001
            out["error"] = exc

    th = threading.Thread(target=go)
    th.start()
    return th, out


# ----------------------------------------------------------------------------
# (a) plaintext never leaves the Delta table
# ----------------------------------------------------------------------------


def test_no_plaintext_outside_the_table_during_a_large_batch(tmp_path, request, dedicated_server):
    srv = _server(dedicated_server, tmp_path)
    try:
        _create(srv.stub, BIG)
        marker = "PLAINTEXT-" + uuid.uuid4().hex
        files = tmp_path / "files"
        files.mkdir()
        f = _big_rows_file(files, marker, 250_000)
        table_dir = Path(srv.warehouse) / SCHEMA / "big"
        roots = {"/tmp": Path("/tmp"), "cwd": ROOT, "TMPDIR": tmp_path / "server-tmp", "warehouse": Path(srv.warehouse)}
        with Watcher(roots, marker.encode(), srv.proc.pid, [table_dir]) as w:
            th, out = _run_in_thread(lambda: srv.stub.WriteBatch(write_request(SCHEMA, BIG, replace=[f]), timeout=300))
            th.join()
        assert "error" not in out, out
        assert out["result"].success
        rows = read_delta_table(str(table_dir))
        assert rows.num_rows == 250_000
        assert w.polls >= 3, "the watcher should have looked several times during the batch"
        assert w.walks >= 1, "the watcher should have walked /tmp and the checkout during the batch"
        assert not w.hits, f"decrypted batch data found outside the table: {w.hits}"
        # nothing new at all in the server's private TMPDIR or elsewhere in the warehouse
        assert not w.new_outside["TMPDIR"], w.new_outside["TMPDIR"]
        assert not w.new_outside["warehouse"], w.new_outside["warehouse"]
        bad = [p for p in w.table_files if not any(re.fullmatch(rx + r"(#\d+)?", p) for rx in TABLE_FILE_OK)]
        assert not bad, f"unexpected files inside the table directory: {bad}"
        assert any(p.endswith(".parquet") for p in w.table_files)
        # the only file the server held open for writing outside the table is its log (stdout/stderr)
        others = {p for p in w.written if not p.startswith(str(table_dir) + os.sep) and p != str(srv.log_path)}
        assert not others, f"the server wrote to {others}"
        log = srv.log_text()
        assert marker not in log
        request.config.cache.set("reliability/secrets_plaintext", {
            "rows": rows.num_rows, "polls": w.polls, "walks": w.walks, "files_scanned": w.scanned_files,
            "bytes_scanned": w.scanned_bytes, "table_files": len(w.table_files),
            "new_files_outside": {k: len(v) for k, v in w.new_outside.items()}})
    finally:
        srv.stop()


def test_staging_table_is_removed_after_the_batch(tmp_path, engine, dedicated_server):
    """The known exception: above the local-relation limit the source is staged under the
    warehouse (Sail: a Delta table; Spark: Parquet files the engine reads in parallel)."""
    srv = _server(dedicated_server, tmp_path, engine, FIVETRAN_DELTA_LOCAL_RELATION_LIMIT="200000")
    try:
        _create(srv.stub, BIG)
        marker = "PLAINTEXT-" + uuid.uuid4().hex
        files = tmp_path / "files"
        files.mkdir()
        f = _big_rows_file(files, marker, 30_000)
        wh = Path(srv.warehouse)
        staging = wh / "_fivetran_staging"
        table_dir = wh / SCHEMA / "big"
        # (Spark's JVM keeps its own private 0700 scratch under TMPDIR: tests/engines/test_spark_process.py)
        roots = {"TMPDIR": tmp_path / "server-tmp", "warehouse": wh} if engine == "sail" else {"warehouse": wh}
        with Watcher(roots, marker.encode(), srv.proc.pid, [table_dir], staging=staging) as w:
            assert srv.stub.WriteBatch(write_request(SCHEMA, BIG, replace=[f]), timeout=300).success
        assert w.staging_seen, "the batch should have gone through the staging table"
        assert not w.hits and not w.new_outside.get("TMPDIR"), (w.hits, w.new_outside)
        assert not staging.exists() or not any(staging.iterdir()), "staging data left behind"
        assert read_delta_table(str(table_dir)).num_rows == 30_000
    finally:
        srv.stop()


def test_staging_table_is_removed_at_startup_after_a_crash(tmp_path, engine, dedicated_server):
    env = {"FIVETRAN_DELTA_LOCAL_RELATION_LIMIT": "100000"}
    # A JVM of its own: the kill -9 below must take the engine (and its in-flight staging) with it.
    srv = _server(dedicated_server, tmp_path, engine, own_jvm=True, **env)
    wh = Path(srv.warehouse)
    staging = wh / "_fivetran_staging"
    table_dir = wh / SCHEMA / "big"
    try:
        _create(srv.stub, BIG)
        v0 = delta_version(str(table_dir))
        f = _big_rows_file(tmp_path, "PLAINTEXT-" + uuid.uuid4().hex, 60_000)
        th, out = _run_in_thread(lambda: srv.stub.WriteBatch(write_request(SCHEMA, BIG, replace=[f]), timeout=300))
        deadline = time.time() + 120
        while time.time() < deadline and not any(staging.rglob("*.parquet")):
            time.sleep(0.01)
        assert any(staging.rglob("*.parquet")), "staging never started"
        srv.proc.kill()  # SIGKILL mid-staging
        th.join()
    finally:
        srv.stop()
    assert any(staging.rglob("*.parquet")), "the crash should have left staging data behind"
    srv = _server(dedicated_server, tmp_path, engine, own_jvm=True, **env)  # restart on the same warehouse
    try:
        assert not staging.exists() or not any(staging.iterdir()), "staging data survived the restart"
        # the table is untouched (the MERGE never ran) and still usable
        assert delta_version(str(table_dir)) == v0
        assert read_delta_table(str(table_dir)).num_rows == 0
        assert srv.stub.WriteBatch(write_request(SCHEMA, BIG, replace=[f]), timeout=300).success
        assert read_delta_table(str(table_dir)).num_rows == 60_000
        assert not staging.exists() or not any(staging.iterdir())
    finally:
        srv.stop()


# ----------------------------------------------------------------------------
# (b) keys, configuration secrets and customer values never in logs or errors
# ----------------------------------------------------------------------------


def _key_forms(key: bytes) -> list:
    return [key, key.hex(), key.hex().upper(), base64.b64encode(key).decode(), base64.urlsafe_b64encode(key).decode(),
            base64.b64encode(key).decode().rstrip("="), repr(key)[2:-1], key.hex()[:16]]


def _leaks(haystack: bytes, needles) -> list:
    out = []
    for n in needles:
        nb = n if isinstance(n, bytes) else n.encode()
        if nb and nb in haystack:
            out.append(n)
    return out


SEC = table("sec", col("id", "INT", pk=True), col("txt", "STRING"), col("num", "INT"), col("day", "NAIVE_DATE"),
            col("_fivetran_synced", "UTC_DATETIME"), col("_fivetran_deleted", "BOOLEAN"))


def test_keys_secrets_and_values_never_in_logs_or_errors(tmp_path, request, dedicated_server):
    srv = _server(dedicated_server, tmp_path)
    token = "SECRET-TOKEN-" + uuid.uuid4().hex
    value = "SECRET-VALUE-" + uuid.uuid4().hex
    config = {"warehouse": str(srv.warehouse), "secret_token": token}
    keys: list[bytes] = []
    messages: list[str] = []
    files = tmp_path / "files"
    files.mkdir()

    def f(rows, **kw):
        p, k = batch_file(files, kw.pop("tbl", SEC), rows, shuffle=False, **kw)
        if k:
            keys.append(k)
        return p, k

    def wb(tbl=SEC, **kw):
        req = write_request(SCHEMA, tbl, **kw)
        req.configuration.update(config)
        return req

    def expect_fail(call, req):
        with pytest.raises(grpc.RpcError) as info:
            call(req, timeout=120)
        messages.append(f"{info.value.code()}: {info.value.details()}")
        return info.value

    def row(i, **over):
        r = {"id": i, "txt": f"{value}-{i}", "num": i, "day": "2024-01-02", "_fivetran_synced": T0, "_fivetran_deleted": False}
        r.update(over)
        return r

    try:
        _create(srv.stub, SEC, configuration=config)
        # successful requests carrying planted values and the secret
        assert srv.stub.WriteBatch(wb(replace=[f([row(1), row(2)])]), timeout=120).success
        assert srv.stub.WriteBatch(wb(update=[f([{"id": 1, "txt": value + "-upd", "_fivetran_synced": T0}], kind="update",
                                                columns=["id", "txt", "_fivetran_synced"])]), timeout=120).success
        assert srv.stub.DescribeTable(pb.DescribeTableRequest(schema_name=SCHEMA, table_name="sec", configuration=config)).table
        # a wrong key (the file's key is known and planted in the log check), a short key, a missing key
        p, k = f([row(3)])
        wrong = new_key()
        keys.append(wrong)
        expect_fail(srv.stub.WriteBatch, wb(replace=[(p, wrong)]))
        expect_fail(srv.stub.WriteBatch, wb(replace=[(p, k[:16])]))
        expect_fail(srv.stub.WriteBatch, wb(replace=[(p, k)], keys_override={}))
        # values that do not fit their column, carrying the planted value
        expect_fail(srv.stub.WriteBatch, wb(replace=[f([row(4, num=value)])]))
        expect_fail(srv.stub.WriteBatch, wb(replace=[f([row(5, day=value)])]))
        # an unknown column (its cells hold the planted value)
        extra = table("sec", *SEC.columns, col("unknown_col", "STRING"))
        expect_fail(srv.stub.WriteBatch, wb(replace=[f([dict(row(6), unknown_col=value)], tbl=extra)]))
        # an engine error whose own message quotes the value: STRING -> INT over text values
        bad_alter = table("sec", *[c if c.name != "txt" else col("txt", "INT") for c in SEC.columns])
        expect_fail(srv.stub.AlterTable, pb.AlterTableRequest(schema_name=SCHEMA, table=bad_alter, configuration=config))
        # an engine URL carrying a token: the Spark Connect client's own error quotes the whole URL.
        # (A well-formed but unreachable URL is retried by the client for minutes, see
        # docs/reliability.md, so the malformed form that fails at once is used here.)
        remote = f"sc:///;token={token}"
        expect_fail(srv.stub.DescribeTable, pb.DescribeTableRequest(
            schema_name=SCHEMA, table_name="sec", configuration={**config, "engine": "spark", "spark_remote": remote}))
        # setup tests with the secrets in their configuration: failures are answered, not raised
        r = srv.stub.Test(common_pb2.TestRequest(name="spark_engine", configuration={**config, "spark_remote": remote}),
                          timeout=120)
        assert not r.success
        messages.append(f"Test spark_engine: {r.failure}")
        r = srv.stub.Test(common_pb2.TestRequest(name="warehouse_writable", configuration=config), timeout=120)
        assert r.success, r
        time.sleep(0.5)  # let the last log lines land
        log = Path(srv.log_path).read_bytes()
    finally:
        srv.stop()
    log += Path(srv.log_path).read_bytes()[len(log):]
    assert len(messages) == 9, messages
    needles = [token, value] + [form for k in keys for form in _key_forms(k)]
    for m in messages:
        assert not _leaks(m.encode(), needles), f"an error message leaks a secret: {m!r}"
    leaked = _leaks(log, needles)
    assert not leaked, f"the server log leaks {len(leaked)} secrets, e.g. {leaked[:1]}"
    assert len(keys) >= 7
    request.config.cache.set("reliability/secrets_logs", {
        "error_messages": len(messages), "keys": len(keys), "needles": len(needles), "log_bytes": len(log)})
    print("\n".join(["", "error messages checked:"] + messages))


def test_staged_batches_keep_every_type(tmp_path, engine, dedicated_server):
    """Every batch staged (a 1 kB local-relation limit): the tester's input.json, all types
    incl. naive and UTC timestamps, decimals, binary and JSON, compared with the model."""
    from testkit import tester as tc
    from testkit.server_process import TESTER_INPUTS

    srv = _server(dedicated_server, tmp_path, engine, FIVETRAN_DELTA_LOCAL_RELATION_LIMIT="1000")
    try:
        log = []
        result = tc.run_input_file(srv.stub, srv.warehouse, TESTER_INPUTS / "input.json", "staged", log=log.append)
        assert result.ok, "\n".join(result.problems + log[-30:])
        assert "stage" not in " ".join(result.problems)
        staging = Path(srv.warehouse) / "_fivetran_staging"
        assert not staging.exists() or not any(staging.iterdir())
    finally:
        srv.stop()
