"""WriteBatch and Truncate through real gRPC, real encrypted batch files, real Delta tables."""
from __future__ import annotations

import datetime as dt
import os
import threading
from decimal import Decimal

import grpc
import pytest

from testkit.fivetran_requests import ON_BOTH_STORAGES, batch_file, col, expect_error, table, ts, write_request
from testkit.delta_read import delta_version, last_operation, read_delta_table
from delta_destination.doors.fivetran._proto import destination_sdk_pb2 as pb
from delta_destination.doors.fivetran.batch_files import Compression

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)

ALL = table(
    "all_types",
    col("id", "INT", pk=True), col("b", "BOOLEAN"), col("s", "SHORT"), col("l", "LONG"),
    col("dec", "DECIMAL", precision=38, scale=10), col("f", "FLOAT"), col("d", "DOUBLE"),
    col("nd", "NAIVE_DATE"), col("ndt", "NAIVE_DATETIME"), col("u", "UTC_DATETIME"), col("bin", "BINARY"),
    col("x", "XML"), col("str", "STRING"), col("j", "JSON"), col("t", "NAIVE_TIME"),
    col("_fivetran_synced", "UTC_DATETIME"), col("_fivetran_deleted", "BOOLEAN"),
)


def row(i, **over):
    r = {
        "id": i, "b": i % 2 == 0, "s": -32768 if i == 1 else 32767, "l": 2**63 - 1 if i == 1 else -(2**63),
        "dec": Decimal("1234567890123456789012345678.0123456789"), "f": 1.5, "d": -2.25e300,
        "nd": "0001-01-01" if i == 1 else "9999-12-31", "ndt": "2023-10-27T15:00:00", "u": "2023-10-27T15:00:00.123Z",
        "bin": b"\x00\xffbin", "x": "<a>x</a>", "str": 'text, with "quotes"\nand newline', "j": '{"a":1}',
        "t": "10:15:30", "_fivetran_synced": T0, "_fivetran_deleted": False,
    }
    r.update(over)
    return r


def create(stub, schema, t):
    assert stub.CreateTable(pb.CreateTableRequest(schema_name=schema, table=t)).success


def rows_of(server, schema, name, key="id"):
    t = read_delta_table(f"{server.warehouse}/{schema}/{name}")
    return {r[key]: r for r in t.to_pylist()}


def path_of(server, schema, name):
    return f"{server.warehouse}/{schema}/{name}"


@ON_BOTH_STORAGES
def test_all_operations_in_one_commit(stub, server, unique_schema, tmp_path):
    create(stub, unique_schema, ALL)
    first = [row(1), row(2), row(3), row(4), row(5)]
    stub.WriteBatch(write_request(unique_schema, ALL, replace=[batch_file(tmp_path, ALL, first)]))
    v = delta_version(path_of(server, unique_schema, "all_types"))
    t1 = T0 + dt.timedelta(minutes=1)
    replace = [row(1, str="replaced", _fivetran_synced=t1), row(6, _fivetran_synced=t1)]
    update = [
        {"id": 2, "str": "partial", "s": None, "_fivetran_synced": t1},          # one value, one NULL, rest unmodified
        {"id": 4, "_fivetran_deleted": True, "_fivetran_synced": t1},            # soft delete
        {"id": 99, "str": "missing row", "_fivetran_synced": t1},                # update of a missing row: ignored
    ]
    delete = [{"id": 3, "_fivetran_synced": t1}, {"id": 98, "_fivetran_synced": t1}]
    req = write_request(
        unique_schema, ALL,
        replace=[batch_file(tmp_path, ALL, replace)],
        update=[batch_file(tmp_path, ALL, update, kind="update", columns=["id", "str", "s", "_fivetran_synced", "_fivetran_deleted"])],
        delete=[batch_file(tmp_path, ALL, delete, kind="delete", columns=["id", "_fivetran_synced"])],
    )
    assert stub.WriteBatch(req).success
    assert delta_version(path_of(server, unique_schema, "all_types")) == v + 1, "one WriteBatch must be one Delta commit"
    got = rows_of(server, unique_schema, "all_types")
    assert sorted(got) == [1, 2, 4, 5, 6]
    assert got[1]["str"] == "replaced" and got[1]["_fivetran_synced"] == t1
    assert got[2]["str"] == "partial" and got[2]["s"] is None
    # every unmodified column of row 2 kept its stored value, all types
    before = row(2)
    for c in ("b", "l", "f", "d", "nd", "ndt", "u", "bin", "x", "j", "t", "dec", "_fivetran_deleted"):
        assert got[2][c] is not None, c
    assert got[2]["l"] == before["l"] and got[2]["bin"] == b"\x00\xffbin" and got[2]["dec"] == before["dec"]
    assert got[2]["nd"] == dt.date(9999, 12, 31) and got[2]["u"] == dt.datetime(2023, 10, 27, 15, 0, 0, 123000, tzinfo=UTC)
    assert got[2]["ndt"] == dt.datetime(2023, 10, 27, 15, 0) and got[2]["t"] == "10:15:30"
    assert got[4]["_fivetran_deleted"] is True and got[4]["str"] == before["str"]
    assert got[5]["_fivetran_synced"] == T0
    # replaying the same request converges to the same table
    assert stub.WriteBatch(req).success
    assert rows_of(server, unique_schema, "all_types") == got


@ON_BOTH_STORAGES
def test_edge_values_round_trip(stub, server, unique_schema, tmp_path):
    create(stub, unique_schema, ALL)
    rows = [
        row(1, f=3.4028235e38, d=float("inf"), dec=Decimal("-9999999999999999999999999999.9999999999"),
            u="9999-12-31T23:59:59.999Z", ndt="0001-01-01T00:00:00", str="", j="null", bin=b""),
        row(2, f=float("nan"), d=-0.0, str="null", x=None, t="23:59:59.999999", b=None),
    ]
    stub.WriteBatch(write_request(unique_schema, ALL, replace=[batch_file(tmp_path, ALL, rows)]))
    got = rows_of(server, unique_schema, "all_types")
    assert got[1]["d"] == float("inf") and got[1]["str"] == "" and got[1]["j"] == "null" and got[1]["bin"] == b""
    assert got[1]["u"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
    assert got[1]["dec"] == Decimal("-9999999999999999999999999999.9999999999")
    assert got[2]["f"] != got[2]["f"]  # NaN
    assert got[2]["str"] == "null" and got[2]["x"] is None and got[2]["b"] is None


@ON_BOTH_STORAGES
def test_table_without_primary_key_uses_fivetran_id(stub, server, unique_schema, tmp_path):
    t = table("nopk", col("_fivetran_id", "STRING", pk=True), col("name", "STRING"), col("n", "INT"),
              col("_fivetran_synced", "UTC_DATETIME"), col("_fivetran_deleted", "BOOLEAN"))
    create(stub, unique_schema, t)
    base = {"_fivetran_synced": T0, "_fivetran_deleted": False}
    stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, [
        {"_fivetran_id": "a", "name": "A", "n": 1, **base}, {"_fivetran_id": "b", "name": "B", "n": 2, **base}])]))
    stub.WriteBatch(write_request(
        unique_schema, t,
        update=[batch_file(tmp_path, t, [{"_fivetran_id": "a", "n": 10, "_fivetran_synced": T0}], kind="update",
                           columns=["_fivetran_id", "n", "_fivetran_synced"])],
        delete=[batch_file(tmp_path, t, [{"_fivetran_id": "b", "_fivetran_synced": T0}], kind="delete",
                           columns=["_fivetran_id", "_fivetran_synced"])],
    ))
    got = rows_of(server, unique_schema, "nopk", key="_fivetran_id")
    assert list(got) == ["a"] and got["a"]["name"] == "A" and got["a"]["n"] == 10


def _snapshot(server, schema, name):
    p = path_of(server, schema, name)
    return delta_version(p), sorted(map(repr, read_delta_table(p).to_pylist()))


BAD_CASES = ["wrong_key", "missing_key", "truncated", "corrupt", "bad_value", "unknown_column", "malformed_csv",
             "duplicate_key", "second_file_bad", "short_key", "null_key", "plaintext_but_aes"]


@pytest.mark.parametrize("case", BAD_CASES)
@ON_BOTH_STORAGES
def test_bad_input_leaves_table_unchanged(stub, server, unique_schema, tmp_path, case):
    create(stub, unique_schema, ALL)
    stub.WriteBatch(write_request(unique_schema, ALL, replace=[batch_file(tmp_path, ALL, [row(1), row(2)])]))
    before = _snapshot(server, unique_schema, "all_types")
    good = batch_file(tmp_path, ALL, [row(7, str="SECRET-VALUE-7")])
    kw = {}
    if case == "wrong_key":
        files = [(good[0], os.urandom(32))]
    elif case == "short_key":
        files = [(good[0], os.urandom(16))]
    elif case == "missing_key":
        files = [good]
        kw["keys_override"] = {}
    elif case == "truncated":
        data = open(good[0], "rb").read()
        open(good[0], "wb").write(data[: len(data) - 16])
        files = [good]
    elif case == "corrupt":
        data = bytearray(open(good[0], "rb").read())
        data[20] ^= 0xFF  # flips plaintext of the first block: zstd frame broken
        open(good[0], "wb").write(bytes(data))
        files = [good]
    elif case == "bad_value":
        files = [batch_file(tmp_path, ALL, [row(7, s=70000)])]
    elif case == "unknown_column":
        extra = table("all_types", *ALL.columns, col("not_there", "STRING"))
        files = [batch_file(tmp_path, extra, [dict(row(7), not_there="SECRET-VALUE-7")])]
    elif case == "malformed_csv":
        from testkit.batch_files import new_key
        import zstandard
        from cryptography.hazmat.primitives import padding
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        key, iv = new_key(), os.urandom(16)
        plain = zstandard.ZstdCompressor().compress(b'id,str\n1,"SECRET-VALUE-7\n')
        p = padding.PKCS7(128).padder()
        padded = p.update(plain) + p.finalize()
        enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
        path = tmp_path / "malformed.csv.zst.aes"
        path.write_bytes(iv + enc.update(padded) + enc.finalize())
        files = [(str(path), key)]
    elif case == "duplicate_key":
        files = [good, batch_file(tmp_path, ALL, [row(7, str="again")])]
    elif case == "second_file_bad":
        files = [good, batch_file(tmp_path, ALL, [row(8, dec="1e50")])]
    elif case == "null_key":
        files = [batch_file(tmp_path, ALL, [row(7, id=None)])]
    elif case == "plaintext_but_aes":
        files = [batch_file(tmp_path, ALL, [row(7)], encrypt=False)]
        kw["keys_override"] = {files[0][0]: os.urandom(32)}
    err = expect_error(lambda: stub.WriteBatch(write_request(unique_schema, ALL, replace=files, **kw)))
    assert err.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION), (err.code(), err.details())
    assert "SECRET-VALUE" not in err.details()
    assert _snapshot(server, unique_schema, "all_types") == before
    assert "SECRET-VALUE" not in server.log_text()


@ON_BOTH_STORAGES
def test_write_to_missing_table(stub, unique_schema, tmp_path):
    f = batch_file(tmp_path, ALL, [row(1)])
    expect_error(lambda: stub.WriteBatch(write_request(unique_schema, ALL, replace=[f])), grpc.StatusCode.NOT_FOUND)


@pytest.mark.parametrize("compression,encrypt", [(Compression.GZIP, True), (Compression.OFF, True), (Compression.ZSTD, False), (Compression.OFF, False)])
@ON_BOTH_STORAGES
def test_compressions_and_plaintext(stub, server, unique_schema, tmp_path, compression, encrypt):
    create(stub, unique_schema, ALL)
    f = batch_file(tmp_path, ALL, [row(1), row(2)], compression=compression, encrypt=encrypt)
    assert stub.WriteBatch(write_request(unique_schema, ALL, replace=[f], compression=compression, encrypt=encrypt)).success
    assert sorted(rows_of(server, unique_schema, "all_types")) == [1, 2]


def _synced_table():
    return table("tr", col("id", "INT", pk=True), col("v", "STRING"), col("_fivetran_synced", "UTC_DATETIME"),
                 col("_fivetran_deleted", "BOOLEAN"))


@ON_BOTH_STORAGES
def test_truncate_hard_and_soft_millisecond_precision(stub, server, unique_schema, tmp_path):
    t = _synced_table()
    create(stub, unique_schema, t)
    ms = dt.timedelta(milliseconds=1)
    rows = [{"id": i, "v": str(i), "_fivetran_synced": T0 + i * ms, "_fivetran_deleted": False} for i in range(4)]
    stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, rows)]))
    # soft: rows 0 and 1 (synced < T0+2ms) are marked deleted; 0.9 ms below the cut is still "before"
    r = stub.Truncate(pb.TruncateRequest(schema_name=unique_schema, table_name="tr", synced_column="_fivetran_synced",
                                         utc_delete_before=ts(T0 + 2 * ms), soft=pb.SoftTruncate(deleted_column="_fivetran_deleted")))
    assert r.success
    got = rows_of(server, unique_schema, "tr")
    assert [got[i]["_fivetran_deleted"] for i in range(4)] == [True, True, False, False]
    # hard: rows synced before T0+1ms go; the sub-millisecond part of the cut is ignored
    r = stub.Truncate(pb.TruncateRequest(schema_name=unique_schema, table_name="tr", synced_column="_fivetran_synced",
                                         utc_delete_before=ts(T0 + ms + dt.timedelta(microseconds=900))))
    assert r.success
    assert sorted(rows_of(server, unique_schema, "tr")) == [1, 2, 3]


@ON_BOTH_STORAGES
def test_truncate_unknown_synced_column(stub, server, unique_schema, tmp_path):
    create(stub, unique_schema, _synced_table())
    expect_error(lambda: stub.Truncate(pb.TruncateRequest(schema_name=unique_schema, table_name="tr", synced_column="nope",
                                                          utc_delete_before=ts(T0))), grpc.StatusCode.INVALID_ARGUMENT)


@ON_BOTH_STORAGES
def test_concurrent_writes(stub, server, unique_schema, tmp_path):
    """Different tables in parallel; the same table serialized; nothing lost."""
    t = _synced_table()
    tables = [table(f"c{i}", *t.columns) for i in range(3)]
    for tt in tables:
        create(stub, unique_schema, tt)
    errors = []

    def writer(tt, start):
        try:
            for k in range(3):
                rows = [{"id": start + k * 10 + j, "v": "x", "_fivetran_synced": T0, "_fivetran_deleted": False} for j in range(10)]
                assert stub.WriteBatch(write_request(unique_schema, tt, replace=[batch_file(tmp_path, tt, rows)])).success
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(tt, 0)) for tt in tables]
    threads += [threading.Thread(target=writer, args=(tables[0], 1000))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert len(rows_of(server, unique_schema, "c0")) == 60
    assert len(rows_of(server, unique_schema, "c1")) == 30


def test_batch_over_local_relation_limit_goes_through_staging(tmp_path, dedicated_server):
    """The staging path used above the Spark Connect message limit, forced with a tiny limit."""
    srv = dedicated_server(tmp_path / "wh", tmp_path / "log", env={"FIVETRAN_DELTA_LOCAL_RELATION_LIMIT": "20000"})
    try:
        t = _synced_table()
        create(srv.stub, "s", t)
        rows = [{"id": i, "v": "v" * 50, "_fivetran_synced": T0, "_fivetran_deleted": False} for i in range(3000)]
        v0 = delta_version(f"{srv.warehouse}/s/tr")
        assert srv.stub.WriteBatch(write_request("s", t, replace=[batch_file(tmp_path, t, rows)])).success
        assert delta_version(f"{srv.warehouse}/s/tr") == v0 + 1
        assert len(read_delta_table(f"{srv.warehouse}/s/tr")) == 3000
        assert not os.path.exists(tmp_path / "wh" / "_fivetran_staging") or not os.listdir(tmp_path / "wh" / "_fivetran_staging")
    finally:
        srv.stop()


@pytest.mark.slow
@ON_BOTH_STORAGES
def test_batch_larger_than_spark_connect_message_limit(stub, server, unique_schema, tmp_path):
    """A real batch whose Arrow data exceeds the 128 MiB Spark Connect message limit."""
    t = table("big", col("id", "LONG", pk=True), *[col(f"s{i}", "STRING") for i in range(6)],
              col("_fivetran_synced", "UTC_DATETIME"), col("_fivetran_deleted", "BOOLEAN"))
    create(stub, unique_schema, t)
    n = 600_000
    filler = "x" * 40
    rows = ({"id": i, **{f"s{j}": f"{filler}{i}-{j}" for j in range(6)}, "_fivetran_synced": T0, "_fivetran_deleted": False}
            for i in range(n))
    files = [batch_file(tmp_path, t, list(rows))]
    v0 = delta_version(path_of(server, unique_schema, "big"))
    assert stub.WriteBatch(write_request(unique_schema, t, replace=files), timeout=900).success
    assert delta_version(path_of(server, unique_schema, "big")) == v0 + 1
    got = read_delta_table(path_of(server, unique_schema, "big"))
    assert got.num_rows == n and got.nbytes > 128 * 1024 * 1024


@ON_BOTH_STORAGES
def test_write_after_alter_uses_the_new_schema(stub, server, unique_schema, tmp_path):
    """Regression: the engine's catalog entry kept the pre-alter DECIMAL scale and cut values to it."""
    t = table("alt", col("id", "INT", pk=True), col("d", "DECIMAL", precision=38, scale=10), col("_fivetran_synced", "UTC_DATETIME"))
    create(stub, unique_schema, t)
    stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, [{"id": 1, "d": Decimal("1.5"), "_fivetran_synced": T0}])]))
    t2 = table("alt", col("id", "INT", pk=True), col("d", "DECIMAL", precision=38, scale=15), col("_fivetran_synced", "UTC_DATETIME"), col("c", "STRING"))
    assert stub.AlterTable(pb.AlterTableRequest(schema_name=unique_schema, table=t2)).success
    rows = [{"id": 2, "d": Decimal("12345.123456789012345"), "c": "new", "_fivetran_synced": T0}]
    assert stub.WriteBatch(write_request(unique_schema, t2, replace=[batch_file(tmp_path, t2, rows)])).success
    got = rows_of(server, unique_schema, "alt")
    assert got[2]["d"] == Decimal("12345.123456789012345") and got[2]["c"] == "new"
    assert got[1]["d"] == Decimal("1.5") and got[1]["c"] is None


@ON_BOTH_STORAGES
def test_decimal_precision_survives_rewrites(stub, server, unique_schema, tmp_path):
    """Regression: Sail read DECIMAL values from file statistics as doubles, and a MERGE stored that."""
    t = table("dec", col("id", "INT", pk=True), col("d", "DECIMAL", precision=38, scale=15), col("e", "DECIMAL", precision=38, scale=37),
              col("v", "STRING"), col("_fivetran_synced", "UTC_DATETIME"))
    create(stub, unique_schema, t)
    d, e = Decimal("11111.123456789012345"), Decimal("1.1234567890123456789012345678901234567")
    stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, [{"id": 1, "d": d, "e": e, "v": "a", "_fivetran_synced": T0}])]))
    upd = batch_file(tmp_path, t, [{"id": 1, "v": "b", "_fivetran_synced": T0}], kind="update", columns=["id", "v", "_fivetran_synced"])
    assert stub.WriteBatch(write_request(unique_schema, t, update=[upd])).success
    got = rows_of(server, unique_schema, "dec")[1]
    assert (got["d"], got["e"], got["v"]) == (d, e, "b")


def _last_operation(path):
    return last_operation(path)


@ON_BOTH_STORAGES
def test_new_keys_are_appended_without_merge(stub, server, unique_schema, tmp_path):
    t = table("fast", col("id", "INT", pk=True), col("v", "STRING"), col("_fivetran_synced", "UTC_DATETIME"))
    create(stub, unique_schema, t)
    p = path_of(server, unique_schema, "fast")
    first = [{"id": i, "v": "a", "_fivetran_synced": T0} for i in range(10)]
    stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, first)]))
    assert _last_operation(p) != "MERGE"
    # only new keys, plus an update and a delete of keys that do not exist: still an append
    new = [{"id": i, "v": "b", "_fivetran_synced": T0} for i in range(10, 20)]
    upd = batch_file(tmp_path, t, [{"id": 99, "v": "zz", "_fivetran_synced": T0}], kind="update")
    dele = batch_file(tmp_path, t, [{"id": 98, "_fivetran_synced": T0}], kind="delete", columns=["id", "_fivetran_synced"])
    stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, new)], update=[upd], delete=[dele]))
    assert _last_operation(p) != "MERGE"
    assert sorted(rows_of(server, unique_schema, "fast")) == list(range(20))
    # an existing key makes it a MERGE
    stub.WriteBatch(write_request(unique_schema, t, replace=[batch_file(tmp_path, t, [{"id": 5, "v": "c", "_fivetran_synced": T0}])]))
    assert _last_operation(p) == "MERGE"
    assert rows_of(server, unique_schema, "fast")[5]["v"] == "c"
