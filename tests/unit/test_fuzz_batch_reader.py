"""Fuzzing `server.batch_reader.read_batch_file` with hypothesis (issue 5, part 2).

Property: for any file bytes, params and table, the reader either returns
well-formed data or raises a `server.errors.DestinationError` subclass -- never
another exception, never a hang, and an error message never quotes a planted
cell value. Inputs:
  - random bytes as the file (any compression, with or without encryption);
  - random plaintext, correctly compressed and encrypted, so the CSV parser
    and the converters see arbitrary bytes;
  - valid batch files mutated at one layer (ciphertext, compressed stream or
    plaintext): bit flips, truncation, insertion, deletion, duplication;
  - random CSV text from a grammar (quoting right or wrong, field counts off,
    markers, edge values of every type, unicode, control characters);
  - and a round trip: random STRING/BINARY/LONG values written by the
    Fivetran-like writer come back exactly.

Hangs: every example runs under a hard watchdog (faulthandler) that dumps the
stack and exits the process if it takes longer than HANG_SECONDS; hypothesis's
own `deadline` flags slow examples. The default run takes ~30 s; the `slow`
variants run ten times as many examples. Example counts are stored in the
pytest cache under `reliability/fuzz` (figures for docs/reliability.md).
"""
from __future__ import annotations

import base64
import faulthandler
import os
import random
import shutil
import tempfile
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from testkit.batch_files import open_sink, write_batch_file
from delta_destination import errors
from delta_destination.doors.fivetran.batch_files import BatchData, Compression, Encryption, FileFormat, FileParams, read_batch_file
from delta_destination.core.model import Column, DataType as FT, TableSchema

HANG_SECONDS = 120           # hard limit per example: the process is killed with a stack dump
DEADLINE_MS = 20_000         # hypothesis's soft per-example deadline (a loaded 2-core machine)
NULL = "nul-Xq3kTd"
UNMOD = "unm-R8vYw2"
SECRET = "SECRET-fuzz-7c1e"  # planted in data cells: never in an error message

TABLE = TableSchema("fuzz", (
    Column("id", FT.INT, primary_key=True), Column("b", FT.BOOLEAN), Column("s", FT.SHORT), Column("i", FT.INT),
    Column("l", FT.LONG), Column("dec", FT.DECIMAL, precision=10, scale=3), Column("big", FT.DECIMAL, precision=38, scale=0),
    Column("f", FT.FLOAT), Column("d", FT.DOUBLE), Column("nd", FT.NAIVE_DATE), Column("ndt", FT.NAIVE_DATETIME),
    Column("u", FT.UTC_DATETIME), Column("bin", FT.BINARY), Column("x", FT.XML), Column("str", FT.STRING),
    Column("j", FT.JSON), Column("t", FT.NAIVE_TIME),
))
NAMES = TABLE.column_names

COUNTS: Counter = Counter()   # examples run per test (the slow variants count under <name>_long)
_VARIANT = {"suffix": ""}
OUTCOMES: Counter = Counter()  # "data" / error class name


@pytest.fixture(scope="module", autouse=True)
def _figures(request):
    yield
    if COUNTS:
        cache = request.config.cache
        prev = cache.get("reliability/fuzz", {}) or {}
        figures = {"examples": dict(COUNTS), "outcomes_this_run": dict(OUTCOMES)}
        # keep the slow run's numbers when only the default run happened now, and vice versa
        merged = {**prev.get("examples", {}), **figures["examples"]}
        figures["examples"] = merged
        figures["total_default"] = sum(v for k, v in merged.items() if not k.endswith("_long"))
        figures["total_slow"] = sum(v for k, v in merged.items() if k.endswith("_long"))
        cache.set("reliability/fuzz", figures)
        print(f"\nfuzz examples this run: {sum(COUNTS.values())} {dict(COUNTS)}; outcomes {dict(OUTCOMES)}")


@pytest.fixture(scope="module")
def workdir():
    d = tempfile.mkdtemp(prefix="fuzz_reader_")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _params(compression, encrypted, fmt=FileFormat.CSV, null=NULL, unmod=UNMOD) -> FileParams:
    return FileParams(Compression(compression), Encryption.AES if encrypted else Encryption.NONE, null, unmod, fmt)


def check_read(name: str, path: str, key, params: FileParams, table: TableSchema = TABLE, *, allow_unmodified=True,
               secret: str | None = None):
    """The property: data or a DestinationError (with no planted value in it), within HANG_SECONDS."""
    COUNTS[name + _VARIANT["suffix"]] += 1
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    try:
        out = read_batch_file(path, key, params, table, allow_unmodified=allow_unmodified)
    except errors.DestinationError as exc:
        OUTCOMES[type(exc).__name__] += 1
        assert isinstance(exc.message, str) and exc.message
        if secret:
            assert secret not in exc.message, f"error message quotes a cell value: {exc.message!r}"
        return exc
    finally:
        faulthandler.cancel_dump_traceback_later()
    OUTCOMES["data"] += 1
    assert isinstance(out, BatchData)
    assert isinstance(out.values, pa.Table) and out.values.num_rows == out.num_rows
    assert set(out.values.column_names) <= set(table.column_names)
    if out.unmodified is not None:
        assert out.unmodified.num_rows == out.num_rows
    return out


def _write_plain(path: str, plaintext: bytes, key, compression) -> None:
    sink = open_sink(path, key, compression)
    sink.write(plaintext)
    sink.close()


# ----------------------------------------------------------------------------
# strategies
# ----------------------------------------------------------------------------

compressions = st.sampled_from([Compression.OFF, Compression.ZSTD, Compression.GZIP])
keys = st.binary(min_size=32, max_size=32)

EDGE = {
    "b": ["true", "false", "TRUE", "yes", "1", ""],
    "s": ["32767", "-32768", "32768", "-32769", "0", "00012", "+1", "1e3"],
    "i": ["2147483647", "-2147483648", "2147483648", "0x10", "1.0", " 1"],
    "l": ["9223372036854775807", "-9223372036854775808", "9223372036854775808", "-0", "9" * 40],
    "dec": ["1234567.123", "12345678.1", "0.0001", "1e3", "1E-3", "-.5", "5.", ".", "1.2.3", "NaN", "1e999999999"],
    "big": ["9" * 38, "9" * 39, "-" + "9" * 38, "1e37", "1e38", "0e-100000"],
    "f": ["3.4028237E+38", "NaN", "Infinity", "-Infinity", "1e-50", "inf", "0x1p3", "1,5"],
    "d": ["1.7976931348623157E308", "1e309", "-0.0", "4.9E-324", "nan", "abc"],
    "nd": ["0001-01-01", "9999-12-31", "0000-12-31", "2023-02-29", "2024-02-29", "10000-01-01", "2024-1-1"],
    "ndt": ["2007-12-03T10:15:30", "2007-12-03 10:15", "2007-12-03T10:15:30.123456789", "2007-12-03T24:00:00",
            "9999-12-31T23:59:59.999999999", "2007-12-03T10:15:30Z"],
    "u": ["2007-12-03T10:15:30.123Z", "2007-12-03T10:15:30+01:00", "2007-12-03T10:15:30", "0001-01-01T00:00:00Z",
          "9999-12-31T23:59:59.999999999Z", "2007-12-03T10:15:30+25:00", "2007-12-03T10:15:30-0130"],
    "bin": ["", "AA==", "AAE=", "AAEC", "A", "AA=", "====", "A===", "Zm9v\n", "Zm9v YmFy", "_-8="],
    "t": ["10:15:30", "10:15", "23:59:59.999999999", "24:00:00", "9:00:00", "10:15:30.1234567890"],
    "x": ["<a/>", ""], "str": ["", "null", "NULL", '"', "\\", "\r"], "j": ["{}", "null", "{"],
    "id": ["1", "2", "-1", "", "2147483648"],
}

texty = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
special = st.sampled_from(['"', '""', ",", "\n", "\r\n", "\r", "\\", "\x00", "\ufeff", "é", "\u2028", " ", NULL, UNMOD,
                           SECRET])
cell_text = st.one_of(
    texty,
    st.lists(st.one_of(texty, special), max_size=4).map("".join),
    st.sampled_from(sorted({v for vs in EDGE.values() for v in vs})),
)


@st.composite
def csv_documents(draw):
    """A CSV file as text: a header of (mostly) table columns, rows of cells; quoting right or wrong."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=8, unique=True))
    if draw(st.integers(0, 9)) == 0:
        names.append(draw(st.sampled_from(["unknown", "ID", "", names[0]])))  # unknown / wrong case / empty / dup
    nrows = draw(st.integers(0, 6))
    rows = []
    for _ in range(nrows):
        ncells = len(names) + (draw(st.sampled_from([-1, 1])) if draw(st.integers(0, 14)) == 0 else 0)
        row = []
        for j in range(max(ncells, 0)):
            name = names[j] if j < len(names) else "str"
            if draw(st.booleans()):
                v = draw(st.sampled_from(EDGE.get(name, [""]) + [NULL, UNMOD]))
            else:
                v = draw(cell_text)
            row.append(v)
        rows.append(row)
    quoting = draw(st.sampled_from(["minimal", "all", "none", "broken"]))
    eol = draw(st.sampled_from(["\n", "\r\n"]))

    def q(v: str) -> str:
        needs = any(ch in v for ch in ',"\r\n')
        if quoting == "all" or (quoting in ("minimal", "broken") and needs):
            body = v.replace('"', '""') if quoting != "broken" else v
            return f'"{body}"'
        return v

    header = ",".join(q(n) if quoting != "broken" else n for n in names)
    lines = [header] + [",".join(q(v) for v in r) for r in rows]
    text = eol.join(lines) + (eol if draw(st.booleans()) else "")
    if draw(st.integers(0, 9)) == 0:
        text = "\ufeff" + text
    return text


def _valid_rows(rnd: random.Random, n: int):
    rows = []
    for k in range(n):
        rows.append([str(k), rnd.choice(["true", "false", NULL]), str(rnd.randint(-32768, 32767)),
                     str(rnd.randint(-2**31, 2**31 - 1)), str(rnd.randint(-2**63, 2**63 - 1)), "1234.567",
                     "9" * 38, "1.5", "-2.25e300", "2024-02-29", "2007-12-03T10:15:30", "2007-12-03T10:15:30.123Z",
                     base64.b64encode(rnd.randbytes(rnd.randint(0, 7))).decode(), "<a/>",
                     rnd.choice(["", "a,b", 'q"q', "l\nl", SECRET, UNMOD]), '{"a":1}', "10:15:30"])
    return rows


# ----------------------------------------------------------------------------
# the properties (each defined once, run with a default and a slow budget)
# ----------------------------------------------------------------------------


def prop_random_file_bytes(workdir, data, compression, encrypted, key, allow_unmodified):
    path = os.path.join(workdir, "random.bin")
    with open(path, "wb") as f:
        f.write(data)
    check_read("random_file_bytes", path, key if encrypted else None, _params(compression, encrypted),
               allow_unmodified=allow_unmodified)


def prop_random_plaintext(workdir, data, compression, encrypted, key):
    path = os.path.join(workdir, "plain.bin")
    _write_plain(path, data, key if encrypted else None, compression)
    check_read("random_plaintext", path, key if encrypted else None, _params(compression, encrypted))


def prop_mutated_valid_file(workdir, seed, nrows, compression, encrypted, key, layer, mutate):
    rnd = random.Random(seed)
    rows = _valid_rows(rnd, nrows)
    plain = ("\n".join([",".join(NAMES)] + [",".join(_q(v) for v in r) for r in rows]) + "\n").encode()
    path = os.path.join(workdir, "mutated.bin")
    k = key if encrypted else None
    if layer == "plaintext":
        _write_plain(path, mutate(plain), k, compression)
    elif layer == "compressed":
        tmp = os.path.join(workdir, "compressed.bin")
        _write_plain(tmp, plain, None, compression)
        with open(tmp, "rb") as f:
            comp = f.read()
        _write_plain(path, mutate(comp), k, Compression.OFF)
    else:  # ciphertext (or the raw file when not encrypted)
        _write_plain(path, plain, k, compression)
        with open(path, "rb") as f:
            raw = f.read()
        with open(path, "wb") as f:
            f.write(mutate(raw))
    check_read("mutated_valid_file", path, k, _params(compression, encrypted), allow_unmodified=True)


def prop_random_csv(workdir, text, compression, encrypted, key, allow_unmodified):
    path = os.path.join(workdir, "doc.csv")
    _write_plain(path, text.encode("utf-8", "surrogatepass"), key if encrypted else None, compression)
    check_read("random_csv_text", path, key if encrypted else None, _params(compression, encrypted),
               allow_unmodified=allow_unmodified, secret=SECRET)


def prop_round_trip(workdir, values):
    """Valid values written by the Fivetran-like writer come back exactly (STRING, BINARY, LONG)."""
    path = os.path.join(workdir, "rt.csv")
    rows = [[str(i), s, base64.b64encode(b).decode(), str(n)] for i, (s, b, n) in enumerate(values)]
    write_batch_file(path, ["id", "str", "bin", "l"], rows, key=None, compression=Compression.ZSTD,
                     null_string=NULL, unmodified_string=UNMOD)
    out = check_read("round_trip", path, None, _params(Compression.ZSTD, False))
    assert isinstance(out, BatchData), out
    assert out.values.column("str").to_pylist() == [s for s, _, _ in values]
    assert out.values.column("bin").to_pylist() == [b for _, b, _ in values]
    assert out.values.column("l").to_pylist() == [n for _, _, n in values]


def _q(v: str) -> str:
    return '"' + v.replace('"', '""') + '"' if any(ch in v for ch in ',"\r\n') else v


round_trip_values = st.lists(st.tuples(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30).filter(lambda s: s not in (NULL, UNMOD)),
    st.binary(max_size=20),
    st.integers(-2**63, 2**63 - 1)), max_size=20)


def _wrap(prop, strategies: dict, examples: int, slow: bool):
    cfg = settings(max_examples=examples, deadline=DEADLINE_MS, database=None, derandomize=False,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                          HealthCheck.filter_too_much, HealthCheck.data_too_large])

    @cfg
    @given(**strategies)
    def test(workdir, **kw):
        _VARIANT["suffix"] = "_long" if slow else ""
        prop(workdir, **kw)

    test.__name__ = prop.__name__.replace("prop_", "test_") + ("_long" if slow else "")
    return pytest.mark.slow(test) if slow else test


def _mutated_strategies():
    return dict(seed=st.integers(0, 2**32 - 1), nrows=st.integers(0, 30), compression=compressions,
                encrypted=st.booleans(), key=keys, layer=st.sampled_from(["plaintext", "compressed", "ciphertext"]),
                mutate=st.builds(_Mutator, st.randoms(use_true_random=False)))


class _Mutator:
    """A seeded mutation (hypothesis draws the Random) usable inside the property."""

    def __init__(self, rnd: random.Random):
        self.rnd = rnd

    def __call__(self, data: bytes) -> bytes:
        rnd, b = self.rnd, bytearray(data)
        for _ in range(rnd.randint(1, 3)):
            if not b:
                b += rnd.randbytes(rnd.randint(1, 8))
                continue
            i = rnd.randrange(len(b))
            kind = rnd.choice(["flip", "truncate", "insert", "delete", "duplicate", "set"])
            if kind == "flip":
                b[i] ^= 1 << rnd.randrange(8)
            elif kind == "truncate":
                del b[i:]
            elif kind == "insert":
                b[i:i] = rnd.randbytes(rnd.randint(1, 16))
            elif kind == "delete":
                del b[i:i + rnd.randint(1, 16)]
            elif kind == "duplicate":
                n = rnd.randint(1, 32)
                b[i:i] = b[i:i + n]
            else:
                b[i] = rnd.choice([0, 0x22, 0x2C, 0x0A, 0x0D, 0xFF, 0xC3])
        return bytes(b)

    def __repr__(self) -> str:
        return "_Mutator(...)"


SUITES = [
    (prop_random_file_bytes, lambda: dict(data=st.binary(max_size=600), compression=compressions, encrypted=st.booleans(),
                                          key=keys, allow_unmodified=st.booleans()), 1200),
    (prop_random_plaintext, lambda: dict(data=st.binary(max_size=600), compression=compressions, encrypted=st.booleans(),
                                         key=keys), 1200),
    (prop_mutated_valid_file, _mutated_strategies, 2000),
    (prop_random_csv, lambda: dict(text=csv_documents(), compression=compressions, encrypted=st.booleans(), key=keys,
                                   allow_unmodified=st.booleans()), 2000),
    (prop_round_trip, lambda: dict(values=round_trip_values), 400),
]
SLOW_FACTOR = 10

for _prop, _strats, _n in SUITES:
    for _slow in (False, True):
        _t = _wrap(_prop, _strats(), _n * (SLOW_FACTOR if _slow else 1), _slow)
        globals()[_t.__name__] = _t
del _prop, _strats, _n, _slow, _t


def test_property_rejects_foreign_exceptions(workdir, monkeypatch):
    """The harness itself: an exception that is not a DestinationError fails the property."""
    from delta_destination.doors.fivetran import batch_files as br

    def boom(*a, **k):
        raise ValueError("not typed")

    monkeypatch.setattr(br, "read_csv", boom)
    monkeypatch.setitem(_VARIANT, "suffix", "")
    path = os.path.join(workdir, "x.csv")
    with open(path, "wb") as f:
        f.write(b"id\n1\n")
    with pytest.raises(ValueError):
        check_read("harness", path, None, _params(Compression.OFF, False))
    COUNTS.pop("harness", None)
