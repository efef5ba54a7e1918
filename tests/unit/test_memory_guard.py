"""The Sail MERGE memory guard (core/memory.py, docs/sail-merge-memory.md): unit tests of the
estimate, the budget setting and the message, which need no engine. The acceptance test, real
WriteBatch requests to a Sail server started with a tiny budget, is
tests/engines/test_memory_guard_server.py.
"""
from __future__ import annotations

import grpc
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from delta_destination.errors import EngineError, InvalidRequest, MemoryBudgetExceeded
from delta_destination.core.registry import TableRef, read_table_snapshot
from delta_destination.core.memory import TableSize, check_budget, gb, table_size
from delta_destination.engines.dialect import SailDialect, SparkDialect
from delta_destination.doors.fivetran.main import parse_args
from delta_destination.settings import MEMORY_BUDGET_ENV, Settings, parse_budget
from delta_destination.core.table_dirs import table_location
from delta_destination.warehouse import Warehouse

GiB = 2**30
MiB = 2**20


# ---- the estimate --------------------------------------------------------------------------

def test_sail_estimate_covers_every_measurement():
    """docs/sail-merge-memory.md: peak RSS (MiB) per target Parquet size (bytes) of the repro."""
    measured = [(44_100_000, 1147), (147_100_000, 2481), (294_200_000, 5021)]
    sail = SailDialect()
    for target_bytes, peak_mib in measured:
        est = sail.merge_memory_estimate(target_bytes, 15 * MiB) / MiB
        assert peak_mib <= est <= peak_mib * 1.25, (target_bytes, peak_mib, est)


def test_sail_estimate_grows_with_target_and_source():
    sail = SailDialect()
    assert sail.merge_memory_estimate(0, 0) == 512 * MiB
    assert sail.merge_memory_estimate(100 * MiB, 0) == 512 * MiB + 1700 * MiB
    assert sail.merge_memory_estimate(0, 10 * MiB) == 512 * MiB + 40 * MiB


def test_spark_has_no_estimate():
    """Spark + Delta streams the target: never refused, whatever the table size."""
    assert SparkDialect().merge_memory_estimate(0, 0) is None
    assert SparkDialect().merge_memory_estimate(10**13, 10**9) is None


# ---- the check and its message ----------------------------------------------------------------

def test_check_budget_passes_at_or_under_budget_and_without_estimate():
    size = TableSize(files=3, bytes=10 * MiB, rows=1000)
    check_budget("s.t", "sail", size, None, 1)
    check_budget("s.t", "sail", size, GiB, GiB)


def test_check_budget_message_names_size_estimate_budget_and_spark():
    size = TableSize(files=12, bytes=3 * GiB // 2, rows=3_000_000)
    with pytest.raises(MemoryBudgetExceeded) as info:
        check_budget("s.orders", "sail", size, 9 * GiB, 4 * GiB)
    msg = info.value.message
    assert isinstance(info.value, EngineError)
    for part in ("s.orders", "3,000,000 rows", "12 files", "1.5 GB of Parquet", "9.0 GB", "4.0 GB",
                 "--engine spark", "--spark-remote", "Nothing was written"):
        assert part in msg, (part, msg)


def test_check_budget_without_row_counts():
    with pytest.raises(MemoryBudgetExceeded) as info:
        check_budget("s.t", "sail", TableSize(2, GiB, None), 2 * GiB, GiB)
    assert "rows" not in info.value.message and "2 files" in info.value.message


def test_gb():
    assert gb(0) == "0.0 GB" and gb(5 * GiB) == "5.0 GB"


# ---- the table's size from its log ---------------------------------------------------------

def test_table_size_reads_the_delta_log(tmp_path):
    wh = Warehouse(str(tmp_path))
    ref = TableRef("s", "t", table_location(wh, "s", "t"), wh)
    path = ref.location
    write_deltalake(path, pa.table({"id": list(range(100)), "v": ["x" * 20] * 100}))
    write_deltalake(path, pa.table({"id": list(range(100, 150)), "v": ["y"] * 50}), mode="append")
    size = table_size(read_table_snapshot(ref))
    files = sorted(p for p in (tmp_path / "s" / "t").iterdir() if p.suffix == ".parquet")
    assert size == TableSize(files=2, bytes=sum(p.stat().st_size for p in files), rows=150)
    # Overwritten files leave the sum (removed by the log, still on disk until VACUUM).
    write_deltalake(path, pa.table({"id": [1], "v": ["z"]}), mode="overwrite")
    assert table_size(read_table_snapshot(ref)).files == 1 and table_size(read_table_snapshot(ref)).rows == 1


def test_table_size_of_stores_the_destination_cannot_list_is_not_measured():
    """Only the engine reaches dbfs:/, hdfs:// ... warehouses: no size, so no guard (S3, Azure and GCS
    warehouses are listed by the destination and measured through delta-rs with their options)."""
    for root in ("dbfs:/mnt/wh", "hdfs://nn:8020/wh"):
        wh = Warehouse(root)
        assert table_size(read_table_snapshot(TableRef("s", "t", table_location(wh, "s", "t"), wh))) is None


# ---- the budget setting -------------------------------------------------------------------

def test_budget_default_is_4gb_or_half_the_ram(monkeypatch):
    from delta_destination.settings import physical_memory

    monkeypatch.delenv(MEMORY_BUDGET_ENV, raising=False)
    assert Settings.create("/wh").memory_budget_bytes == min(4 * GiB, physical_memory() // 2)


def test_budget_from_env_flag_and_configuration(monkeypatch):
    monkeypatch.setenv(MEMORY_BUDGET_ENV, "1.5")
    assert Settings.create("/wh").memory_budget_bytes == 3 * GiB // 2
    s = Settings.create("/wh", memory_budget_gb=2)
    assert s.memory_budget_bytes == 2 * GiB  # the flag wins over the environment
    assert s.resolve({"memory_budget_gb": "3"}).memory_budget_bytes == 3 * GiB
    assert s.resolve({"memory_budget_gb": ""}).memory_budget_bytes == 2 * GiB
    assert parse_args(["--warehouse", "/wh", "--memory-budget-gb", "0.5"]).memory_budget_gb == 0.5


@pytest.mark.parametrize("text", ["abc", "0", "-1", "inf", "nan"])
def test_bad_budgets_are_refused(text):
    with pytest.raises(InvalidRequest):
        parse_budget(text)
    with pytest.raises(InvalidRequest):
        Settings.create("/wh").resolve({"memory_budget_gb": text})


# ---- every door answers it clearly --------------------------------------------------------

def test_doors_map_the_refusal():
    from delta_destination.doors.airbyte.main import failure_type
    from delta_destination.doors.conduit.errors import TableWriteFailed
    from delta_destination.doors.conduit.servicer import grpc_status, nack_message
    from delta_destination.doors.fivetran.servicer import grpc_status as fivetran_status

    exc = MemoryBudgetExceeded("table s.t is too large ... (--engine spark ...)")
    assert failure_type(exc) == "config_error"  # Airbyte: a TRACE the platform does not retry blindly
    assert grpc_status(exc) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--engine spark" in nack_message(TableWriteFailed("s.t", exc))
    assert fivetran_status(exc) == grpc.StatusCode.RESOURCE_EXHAUSTED
