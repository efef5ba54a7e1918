"""The project's benchmarks and measurements, run as modules from the repository root; results go to
docs/. Test kits they share with the tests come from testkit/.

    .venv/bin/python -m bench                        # make bench (--cluster: make bench-cluster); __main__.py
    .venv/bin/python -m bench.soak                   # make bench-soak: long-running doors, many small batches
    .venv/bin/python -m bench.engine_memory sail     # where a long-running destination's memory goes
    .venv/bin/python -m bench.sail_merge_memory N    # Sail MERGE memory vs target size (reproduction)
    .venv/bin/python -m bench.spark_merge_profile    # where a keyed upsert's time goes on local Spark

The throughput benchmark's parts: runner.py (a whole run), workloads.py, steps.py, data.py, rpc.py,
baseline.py (bare delta-rs), sampling.py, profiles.py + profile_server.py (pyinstrument), object_storage.py,
cluster.py, targets.py, results.py, plot.py, report.py; report_sections.py splices one section into
docs/benchmarks.md (the object-storage, cluster and soak runs)."""
