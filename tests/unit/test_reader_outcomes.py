"""How the readers matrix compares what a reader answered with the rows written (testkit/readers.py):
values in one canonical form whatever Python type a reader hands them in, and an outcome that tells a
refusal from wrong values."""
from __future__ import annotations

import datetime as dt
import doctest
from decimal import Decimal

import pandas as pd

from testkit import readers as R


def test_examples_in_the_docstrings():
    result = doctest.testmod(R)
    assert result.attempted > 0 and result.failed == 0


def test_pandas_forms_of_the_same_rows_compare_equal():
    """pandas turns a NULL integer into NaN and a timestamp into its Timestamp: the same rows."""
    written = [{"id": 1, "n": None, "at": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc), "d": Decimal("1.50")}]
    frame = pd.DataFrame({"id": [1], "n": [float("nan")], "at": [pd.Timestamp("2024-01-01", tz="UTC")],
                          "d": [Decimal("1.5")]})
    assert R.outcome(R.canonical_rows(written), R.canonical_rows(frame.to_dict("records"))) == "right"


def test_a_timestamp_without_its_zone_is_not_the_same_value():
    aware = [{"id": 1, "at": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)}]
    naive = [{"id": 1, "at": dt.datetime(2024, 1, 1)}]
    assert R.outcome(R.canonical_rows(aware), R.canonical_rows(naive)) == "WRONG: values differ in at"


def test_some_columns_null_and_others_differing_are_both_named():
    want = R.canonical_rows([{"id": 1, "a": "x", "b": 1}, {"id": 2, "a": "y", "b": 2}])
    got = R.canonical_rows([{"id": 1, "a": None, "b": 1}, {"id": 2, "a": None, "b": 3}])
    assert R.outcome(want, got) == "WRONG: every value NULL in a; values differ in b"
