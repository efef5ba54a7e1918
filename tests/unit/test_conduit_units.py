"""Exact unit tests of the Conduit door's pure parts: handshake, settings, type mapping,
OpenCDC decoding and folding a batch into one state per key."""
from __future__ import annotations

import datetime as dt
import decimal

import pytest

from delta_destination.doors.conduit.columns import DoesNotFit, new_column, to_python, widened
from delta_destination.doors.conduit.errors import BadRecord, HandshakeError, InvalidConfig
from delta_destination.doors.conduit.handshake import COOKIE_KEY, COOKIE_VALUE, Handshake, negotiate, parse
from delta_destination.doors.conduit.main import launcher_text
from delta_destination.doors.conduit.opencdc import DELETE, UPSERT, Decoded, decode
from delta_destination.doors.conduit.params import parse_config, parse_duration
from delta_destination.doors.conduit.tables import KeyState, TablePlan, fold
from delta_destination.core.model import Column, DataType as T, TableSchema
from testkit.conduit_host import CREATE, DELETE as OP_DELETE, UPDATE, record


def test_handshake_negotiation_and_line():
    env = {COOKIE_KEY: COOKIE_VALUE, "PLUGIN_PROTOCOL_VERSIONS": "2,1"}
    assert negotiate(env) == 2
    assert Handshake(2, "127.0.0.1:1234").line() == "1|2|tcp|127.0.0.1:1234|grpc"
    assert parse("1|2|tcp|127.0.0.1:1234|grpc\n").address == "127.0.0.1:1234"
    with pytest.raises(HandshakeError, match="not meant to be run directly"):
        negotiate({"PLUGIN_PROTOCOL_VERSIONS": "2"})
    with pytest.raises(HandshakeError, match="serves only v2"):
        negotiate({COOKIE_KEY: COOKIE_VALUE, "PLUGIN_PROTOCOL_VERSIONS": "1"})
    with pytest.raises(HandshakeError, match="netrpc"):
        parse("1|2|tcp|127.0.0.1:1|netrpc")


def test_go_durations():
    assert parse_duration("0") == 0
    assert parse_duration("500ms") == 0.5
    assert parse_duration("1m30s") == 90
    assert parse_duration("1.5h") == 5400
    for bad in ("5", "ms", "1x", "1s garbage", "-1s"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_config_defaults_and_errors(tmp_path):
    cfg = parse_config({"warehouse": str(tmp_path), "sdk.rate.perSecond": "5"})
    assert (cfg.schema, cfg.table, cfg.key_column, cfg.key_fields, cfg.batch_size, cfg.batch_delay) == \
        ("conduit", None, "key", (), 1000, 1.0)
    assert cfg.settings.engine == "auto" and cfg.settings.spark_remote is None
    remote = parse_config({"warehouse": "s3://bucket/wh", "spark.remote": "sc://spark:15002", "table": "t",
                           "key.fields": "a, b", "sdk.batch.size": "0", "sdk.batch.delay": "0"})
    # A remote server alone is engine auto's Apache Spark (engine spark with it: everything remote).
    assert remote.settings.engine == "auto" and remote.table == "t" and remote.key_fields == ("a", "b")
    assert (remote.batch_size, remote.batch_delay) == (0, 0.0)
    for raw, msg in (({"warehouse": "w", "sdk.batch.size": "-1"}, ">= 0"),
                     ({"warehouse": "w", "spark.remote": "http://x"}, "Spark Connect URL"),
                     ({"warehouse": "w", "schema": ".."}, "not allowed"),
                     ({"warehouse": " "}, "required")):
        with pytest.raises(InvalidConfig, match=msg):
            parse_config(raw)


def test_type_mapping_and_fit():
    assert new_column("a", True).type == T.BOOLEAN
    assert new_column("a", 3).type == T.LONG
    assert new_column("a", 3.5).type == T.DOUBLE
    assert new_column("a", {"x": 1}).type == T.JSON
    assert new_column("a", b"\x00").type == T.BINARY
    assert new_column("a", dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)).type == T.UTC_DATETIME
    assert new_column("a", dt.datetime(2026, 1, 1)).type == T.NAIVE_DATETIME
    assert new_column("a", dt.date(2026, 1, 1)).type == T.NAIVE_DATE
    assert new_column("a", dt.time(1, 2, 3)).type == T.NAIVE_TIME
    d = new_column("a", decimal.Decimal("1.25"))
    assert (d.type, d.precision, d.scale) == (T.DECIMAL, 38, 2)
    assert new_column("a", None).type == T.STRING
    long_col, double_col = Column("n", T.LONG), Column("n", T.DOUBLE)
    assert to_python(double_col, 3) == 3.0
    assert widened(long_col, 2.5) == Column("n", T.DOUBLE)
    assert widened(long_col, 7) is None
    with pytest.raises(DoesNotFit, match="STRING value where the column is LONG"):
        widened(long_col, "seven")
    with pytest.raises(DoesNotFit):
        to_python(double_col, 2 ** 60)                 # would round
    with pytest.raises(DoesNotFit):
        to_python(Column("n", T.INT), 2 ** 40)
    with pytest.raises(DoesNotFit):
        to_python(Column("d", T.DECIMAL, precision=38, scale=2), decimal.Decimal("1.234"))
    assert to_python(Column("j", T.JSON), "text") == '"text"'
    assert to_python(Column("j", T.JSON), {"a": [1, 2]}) == '{"a": [1, 2]}'


def _cfg(tmp_path, **kw):
    return parse_config({"warehouse": str(tmp_path), **kw})


def test_decode_structured_raw_and_keys(tmp_path):
    cfg = _cfg(tmp_path)
    meta = {"opencdc.collection": "users"}
    d = decode(record(1, CREATE, key={"id": 7}, after={"id": 7.0, "score": 1.5, "big": 2.0 ** 60}, metadata=meta),
               cfg, None, "r1")
    assert (d.action, d.table, d.key) == (UPSERT, "users", {"id": 7})
    assert d.row == {"id": 7, "score": 1.5, "big": 2.0 ** 60}     # integral within 2^53 -> int
    raw = decode(record(2, UPDATE, key=b"word", after=b'{"a": 1}', metadata=meta), cfg, None, "r2")
    assert raw.key == {"key": "word"} and raw.row == {"a": 1, "key": "word"}
    numeric_text = decode(record(3, CREATE, key=b"123", after=b"{}", metadata=meta), cfg, None, "r3")
    assert numeric_text.key == {"key": "123"}                       # raw keys stay text, exactly
    gone = decode(record(4, OP_DELETE, key=b'{"id": 9}', metadata=meta), cfg, None, "r4")
    assert (gone.action, gone.key, gone.row) == (DELETE, {"id": 9}, {})
    fixed = decode(record(5, CREATE, key={"id": 1}, after={}, metadata={}), _cfg(tmp_path, table="t"), None, "r5")
    assert fixed.table == "t"
    by_fields = _cfg(tmp_path, **{"key.fields": "a,b"})
    f = decode(record(6, CREATE, after={"a": 1, "b": "x", "c": 2}, metadata=meta), by_fields, None, "r6")
    assert f.key == {"a": 1, "b": "x"}
    fd = decode(record(7, OP_DELETE, before={"a": 1, "b": "x"}, metadata=meta), by_fields, None, "r7")
    assert fd.key == {"a": 1, "b": "x"}


@pytest.mark.parametrize("rec,msg", [
    (record(1, CREATE, key={"id": None}, after={}, metadata={"opencdc.collection": "t"}), "are null"),
    (record(1, CREATE, key={"id": 1}, after=b"[1, 2]", metadata={"opencdc.collection": "t"}), "not an object"),
    (record(1, CREATE, key=b"\xff", after={}, metadata={"opencdc.collection": "t"}), "not UTF-8"),
    (record(1, CREATE, key={"id": 1}, after=b"x", metadata={"opencdc.collection": "t",
     "opencdc.payload.schema.subject": "s", "opencdc.payload.schema.version": "1"}), "no schema service"),
    (record(1, CREATE, key={"id": 1}, after={"bad\x01": 1}, metadata={"opencdc.collection": "t"}), "control character"),
])
def test_decode_refuses_malformed_records(tmp_path, rec, msg):
    with pytest.raises(BadRecord, match=msg):
        decode(rec, _cfg(tmp_path), None, "record 1")


def _d(action, key, row=None):
    return Decoded(b"", "x", action, "t", key, row or {})


def test_fold_keeps_the_last_state_per_key_in_order():
    recs = [_d(UPSERT, {"k": 1}, {"k": 1, "a": 1, "b": 1}), _d(UPSERT, {"k": 1}, {"k": 1, "b": 2}),
            _d(UPSERT, {"k": 2}, {"k": 2, "a": 5}), _d(DELETE, {"k": 2}), _d(UPSERT, {"k": 2}, {"k": 2, "b": 9}),
            _d(DELETE, {"k": 3})]
    states = fold(recs, lambda r: r.key["k"])
    assert states == {1: KeyState(UPSERT, {"k": 1, "a": 1, "b": 2}), 2: KeyState(UPSERT, {"k": 2, "b": 9}, fresh=True),
                      3: KeyState(DELETE, {"k": 3})}


def test_table_plan_grows_columns_and_refuses_misfits():
    current = TableSchema("t", (Column("id", T.LONG, primary_key=True), Column("n", T.LONG)))
    plan = TablePlan(current)
    plan.admit(_d(UPSERT, {"id": 1}, {"id": 1, "n": 2.5, "new": "x", "nothing": None}))
    assert plan.schema("t").columns == (Column("id", T.LONG, True), Column("n", T.DOUBLE), Column("new", T.STRING))
    with pytest.raises(DoesNotFit, match="differ from the table's key"):
        plan.admit(_d(UPSERT, {"other": 1}, {"other": 1}))
    with pytest.raises(DoesNotFit, match="differs only in case"):
        plan.admit(_d(UPSERT, {"id": 1}, {"id": 1, "NEW": "y"}))
    fresh = TablePlan(None)
    fresh.admit(_d(UPSERT, {"key": "w"}, {"key": "w", "v": 1}))
    assert fresh.schema("t").columns == (Column("key", T.STRING, True), Column("v", T.LONG))


def test_launcher_execs_an_absolute_interpreter():
    assert launcher_text("/opt/my env/bin/python") == \
        "#!/bin/sh\nexec '/opt/my env/bin/python' -m delta_destination.doors.conduit.main \"$@\"\n"


def test_avro_key_and_payload_through_a_schema_source(tmp_path):
    import io

    import fastavro

    from delta_destination.doors.conduit.schemas import dial_target

    key_schema = fastavro.parse_schema({"type": "record", "name": "k", "fields": [{"name": "id", "type": "long"}]})
    row_schema = fastavro.parse_schema({"type": "record", "name": "r", "fields": [
        {"name": "id", "type": "long"}, {"name": "day", "type": {"type": "int", "logicalType": "date"}}]})

    class Source:
        def avro(self, subject, version):
            return {("k", 3): key_schema, ("r", 1): row_schema}[(subject, version)]

    def enc(schema, v):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, v)
        return buf.getvalue()

    meta = {"opencdc.collection": "t", "opencdc.key.schema.subject": "k", "opencdc.key.schema.version": "3",
            "opencdc.payload.schema.subject": "r", "opencdc.payload.schema.version": "1"}
    d = decode(record(1, CREATE, key=enc(key_schema, {"id": 2 ** 62}),
                      after=enc(row_schema, {"id": 2 ** 62, "day": dt.date(2026, 11, 24)}), metadata=meta),
               _cfg(tmp_path), Source(), "r1")
    assert d.key == {"id": 2 ** 62} and d.row == {"id": 2 ** 62, "day": dt.date(2026, 11, 24)}
    with pytest.raises(BadRecord, match="left over"):
        decode(record(2, CREATE, key={"id": 1}, after=enc(row_schema, {"id": 1, "day": dt.date(2026, 1, 1)}) + b"x",
                      metadata={**meta, "opencdc.key.schema.subject": ""}), _cfg(tmp_path), Source(), "r2")
    assert dial_target("[::]:4321") == "127.0.0.1:4321" and dial_target(":9") == "127.0.0.1:9"
    assert dial_target("10.0.0.5:7") == "10.0.0.5:7"


def test_table_plan_never_widens_over_big_integers_and_checks_early_deletes():
    plan = TablePlan(None)
    plan.admit(_d(UPSERT, {"id": 1}, {"id": 1, "n": 2 ** 60}))
    with pytest.raises(DoesNotFit, match="beyond 2\\^53"):
        plan.admit(_d(UPSERT, {"id": 2}, {"id": 2, "n": 0.5}))
    assert plan.schema("t").get("n").type == T.LONG
    early = TablePlan(None)
    gone = _d(DELETE, {"other": "x"})
    early.admit(gone)                       # the table does not exist yet: nothing to check against
    early.admit(_d(UPSERT, {"id": 1}, {"id": 1}))
    with pytest.raises(DoesNotFit, match="differ from the table's key"):
        early.check_delete(gone)
    with pytest.raises(DoesNotFit):
        early.check_delete(_d(DELETE, {"id": "one"}))
    early.check_delete(_d(DELETE, {"id": 5}))


def test_a_payload_field_is_never_overwritten_by_a_different_key(tmp_path):
    meta = {"opencdc.collection": "t"}
    same = decode(record(1, CREATE, key={"id": 1}, after={"id": 1.0, "a": 2}, metadata=meta), _cfg(tmp_path), None, "r")
    assert same.row == {"id": 1, "a": 2}
    with pytest.raises(BadRecord, match="'key' differ from the record key"):
        decode(record(2, CREATE, key=b"word", after={"key": "other"}, metadata=meta), _cfg(tmp_path), None, "r")
    renamed = decode(record(3, CREATE, key=b"word", after={"key": "other"}, metadata=meta),
                     _cfg(tmp_path, **{"key.column": "record_key"}), None, "r")
    assert renamed.row == {"key": "other", "record_key": "word"}


def test_structured_payloads_read_directly_as_json_format_reads_them(tmp_path):
    from google.protobuf import json_format, struct_pb2

    after = {"i": 3.0, "f": 2.5, "big": 2.0 ** 60, "neg": -7.0, "s": "text", "b": False, "n": None,
             "nested": {"list": [1.0, "a", None, True, {"deep": 4.0}], "empty": {}}, "l": []}
    rec = record(1, CREATE, key={"id": 1.0}, after=after, metadata={"opencdc.collection": "t"})
    got = decode(rec, _cfg(tmp_path), None, "r1").row

    def oracle(v):            # json_format, then integral numbers within 2^53 as integers
        if isinstance(v, float) and v.is_integer() and abs(v) <= 2 ** 53:
            return int(v)
        if isinstance(v, dict):
            return {k: oracle(x) for k, x in v.items()}
        if isinstance(v, list):
            return [oracle(x) for x in v]
        return v

    assert got == {**oracle(json_format.MessageToDict(rec.payload.after.structured_data)), "id": 1}
    assert type(got["i"]) is int and type(got["big"]) is float and got["nested"]["list"][4] == {"deep": 4}
    for bad in (float("nan"), float("inf")):
        s = struct_pb2.Struct()
        s.update({"x": bad})
        nan = record(2, CREATE, key={"id": 2.0}, metadata={"opencdc.collection": "t"})
        nan.payload.after.structured_data.CopyFrom(s)
        with pytest.raises(BadRecord, match="payload holds a number that is not finite"):
            decode(nan, _cfg(tmp_path), None, "r2")


def test_buffer_settings(tmp_path):
    assert (_cfg(tmp_path).buffer_records, _cfg(tmp_path).buffer_bytes) == (3000, 64 * 1024 * 1024)
    assert _cfg(tmp_path, **{"sdk.batch.size": "50"}).buffer_records == 150
    assert _cfg(tmp_path, **{"sdk.batch.size": "0"}).buffer_records == 10_000
    assert _cfg(tmp_path, **{"buffer.records": "7", "buffer.bytes": "1024"}).buffer_records == 7
    for raw, msg in (({"buffer.records": "-1"}, ">= 0"), ({"buffer.bytes": "0"}, ">= 1"),
                     ({"buffer.bytes": "lots"}, "integer")):
        with pytest.raises(InvalidConfig, match=msg):
            _cfg(tmp_path, **raw)


def test_pipeline_blocks_the_reader_while_full_and_acks_in_order():
    import threading
    import time

    from delta_destination.doors.conduit.pipeline import Ack, Pipeline

    release = threading.Event()
    batches = []

    def process(records):
        release.wait(30)
        batches.append(len(records))
        return [Ack(bytes(r.position)) for r in records]

    p = Pipeline(process, batch_size=2, batch_delay=0, max_records=4, max_bytes=10 ** 9)
    recs = [record(i, CREATE, key={"id": i}, after={"id": i}) for i in range(1, 12)]
    taken = []

    def reader():
        for r in recs:
            if not p.receive([r]):
                return
            taken.append(r)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    time.sleep(1.0)
    # One batch of 2 is being written (blocked), 4 more wait: the reader is held at the 7th record.
    assert len(taken) == 6 and t.is_alive()
    release.set()
    t.join(30)
    assert len(taken) == 11
    assert p.flush_through(recs[-1].position, 5, 30)
    acks = []
    while not p.acks.empty():
        acks += p.acks.get()
    assert [a.position for a in acks] == [r.position for r in recs]
    assert p.peak_records == 4 and max(batches) <= 2
    p.close()


def test_pipeline_abandon_releases_a_blocked_reader_and_drops_what_waits():
    import threading

    from delta_destination.doors.conduit.pipeline import Ack, Pipeline

    hold = threading.Event()
    p = Pipeline(lambda rs: hold.wait(30) and [Ack(bytes(r.position)) for r in rs], batch_size=1,
                 batch_delay=0, max_records=1, max_bytes=10 ** 9)
    got = []
    t = threading.Thread(target=lambda: got.extend(p.receive([record(i, CREATE, key={"id": i})]) for i in range(5)),
                         daemon=True)
    t.start()
    t.join(1.0)
    assert t.is_alive()                  # held: one record written (blocked), one waiting
    assert p.abandon() == 1
    t.join(5)
    assert got[:2] == [True, True] and got[2:] == [False, False, False]
    hold.set()
    assert p.wait_writer(10)


def test_writer_epoch_claims_and_the_property_watch(tmp_path):
    import json

    from delta_destination.core.delta_log import PropertyWatch
    from delta_destination.doors.conduit.epochs import Epochs, epoch_key, epoch_of, token
    from delta_destination.doors.conduit.errors import Superseded
    from delta_destination.warehouse import Warehouse

    wh = Warehouse(str(tmp_path))

    log_dir = tmp_path / "t" / "_delta_log"
    log_dir.mkdir(parents=True)
    key = epoch_key("pipe:dst")
    versions = []

    def commit(config=None):
        v = len(versions)
        lines = [{"commitInfo": {"operation": "X"}}]
        if config is not None:
            lines.append({"metaData": {"configuration": config}})
        (log_dir / f"{v:020d}.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
        versions.append(v)

    asked = []
    commit({"other": "1"})
    watch = PropertyWatch(wh, str(tmp_path / "t"), key, lambda: asked.append(1) or [])
    assert watch.current() is None
    commit()                                      # a data commit: no metaData
    commit({key: token(1, "a")})
    assert watch.current() == token(1, "a") and watch.version == 2
    assert asked == []                            # the log said it all: the engine was never asked
    assert token(10, "a") > token(9, "zzz") and epoch_of(token(12, "x")) == 12
    # A log with no metaData action left (cleaned up behind a checkpoint): the engine's newest value.
    (tmp_path / "u" / "_delta_log").mkdir(parents=True)
    (tmp_path / "u" / "_delta_log" / f"{7:020d}.json").write_text(json.dumps({"commitInfo": {}}) + "\n")
    assert PropertyWatch(wh, str(tmp_path / "u"), key, lambda: [token(3, "x"), token(4, "y")]).current() == token(4, "y")

    def set_value(table, value):                  # a claim is a commit of its own
        commit({key: value})

    watches: dict = {}

    def current(table):
        return watches.setdefault(table, PropertyWatch(wh, str(tmp_path / table), key, list)).current()

    mine = Epochs("pipe:dst", current, set_value, instance="b")
    assert mine.claim("t", "s.t") == token(2, "b")
    mine.check("t", "s.t")                        # still ours
    commit()
    mine.check("t", "s.t")
    other = Epochs("pipe:dst", current, set_value, instance="c")
    assert other.claim("t", "s.t") == token(3, "c")
    with pytest.raises(Superseded, match=r"newer instance .* \(writer epoch 3, this instance has 2\)"):
        mine.check("t", "s.t")
    other.check("t", "s.t")
    # Another connector's epoch is a property of its own: it never refuses this one.
    assert epoch_key("pipe:other") != key
