"""Which of Delta's in-place type changes an Iceberg reader of the mirrored metadata reads right
(pure; no pyiceberg). A type widened in the Delta log alone leaves the old Parquet files with the
old physical type, and the Iceberg schema names the new one, so a reader must promote each old file
itself. Iceberg's spec allows int -> long, float -> double and a decimal's precision (same scale);
Iceberg's Java reader 1.10.0 (tests/clients/test_iceberg_java_reader.py) also fails its default,
vectorized scan of a Delta SHORT (Parquet INT32 annotated INT(16)) read as long. So, with `iceberg`
on, only the changes below are made in place; every other one (byte or short to long, an integer to
double or decimal, a decimal's scale, date to timestamp) rewrites the table in one commit, which Iceberg
reads as new files of the new type (core/tables.py). Byte and short are Iceberg ints already, so
widening them to int changes nothing an Iceberg reader sees."""
from __future__ import annotations

import re

_SAME_ICEBERG_INT = {("TINYINT", "SMALLINT"), ("TINYINT", "INT"), ("SMALLINT", "INT")}
_PROMOTED = {("INT", "BIGINT"), ("FLOAT", "DOUBLE")}
_DECIMAL = re.compile(r"^DECIMAL\((\d+),(\d+)\)$")


def iceberg_reads_widened(old: str, new: str) -> bool:
    """Does an Iceberg reader read files of Spark SQL type `old` as `new` right (the change made in
    the Delta log alone)?
    >>> iceberg_reads_widened("INT", "BIGINT"), iceberg_reads_widened("SMALLINT", "INT"), iceberg_reads_widened("FLOAT", "DOUBLE")
    (True, True, True)
    >>> iceberg_reads_widened("SMALLINT", "BIGINT"), iceberg_reads_widened("INT", "DOUBLE"), iceberg_reads_widened("DATE", "TIMESTAMP_NTZ")
    (False, False, False)
    >>> iceberg_reads_widened("DECIMAL(10,2)", "DECIMAL(20,2)"), iceberg_reads_widened("DECIMAL(10,2)", "DECIMAL(20,4)")
    (True, False)
    """
    old, new = old.upper().replace(" ", ""), new.upper().replace(" ", "")
    if (old, new) in _SAME_ICEBERG_INT or (old, new) in _PROMOTED:
        return True
    a, b = _DECIMAL.match(old), _DECIMAL.match(new)
    return bool(a and b and a.group(2) == b.group(2) and int(b.group(1)) >= int(a.group(1)))
