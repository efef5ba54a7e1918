"""The increments benchmark's reading of the Delta log: what a request's commits wrote."""
import json

from bench.increments.run import commit_figures, log_version


def _commit(log, version, actions):
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def test_a_file_re_added_with_a_deletion_vector_is_not_counted_as_written(tmp_path):
    log = tmp_path / "_delta_log"
    log.mkdir()
    _commit(log, 0, [{"add": {"path": "a.parquet", "size": 1000}}])
    _commit(log, 1, [
        {"remove": {"path": "a.parquet"}},
        {"add": {"path": "a.parquet", "size": 1000, "deletionVector": {"sizeInBytes": 40}}},
        {"add": {"path": "b.parquet", "size": 300}},
        {"commitInfo": {"operation": "MERGE", "engineInfo": "Apache-Spark/4.0.0 Delta-Lake/4.0.0",
                        "operationMetrics": {"numTargetRowsCopied": "0"}}},
    ])
    _commit(log, 2, [
        {"remove": {"path": "b.parquet"}},
        {"add": {"path": "c.parquet", "size": 500}},
        {"commitInfo": {"operation": "MERGE", "operationMetrics": {"numTargetRowsCopied": 7}}},
    ])
    assert log_version(tmp_path) == 2
    got = commit_figures(tmp_path, 0)
    assert {k: got[k] for k in ("commits", "files_removed", "files_added", "bytes_added", "bytes_written",
                                "rows_copied", "dvs_added")} == {
        "commits": 2, "files_removed": 2, "files_added": 3, "bytes_added": 1800, "bytes_written": 840,
        "rows_copied": 7, "dvs_added": 1}
    assert got["operations"] == ["MERGE", "MERGE"]
    assert commit_figures(tmp_path, 2)["commits"] == 0
