"""The project's benchmarks and measurements, run as modules from the repository root, grouped by
what they measure; results go to docs/. Test kits they share with the tests come from testkit/.

    .venv/bin/python -m bench                        # make bench (--cluster: make bench-cluster); growth/
    .venv/bin/python -m bench.soak                   # make bench-soak: long-running doors, many small batches
    .venv/bin/python -m bench.sync                   # make bench-sync: many tables, small batches, per deployment
    .venv/bin/python -m bench.increments             # make bench-increments: small increments into big tables
    .venv/bin/python -m bench.engines.engine_memory sail     # where a long-running destination's memory goes
    .venv/bin/python -m bench.engines.sail_merge_memory N    # Sail MERGE memory vs target size (reproduction)
    .venv/bin/python -m bench.engines.spark_merge_profile    # where a keyed upsert's time goes on local Spark

growth/: the main benchmark's parts; soak/, sync/, increments/: one benchmark each; engines/: experiments
on one engine; common/: what several share (batch files, calls, baselines, memory, report sections)."""
