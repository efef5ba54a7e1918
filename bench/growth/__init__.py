"""The main benchmark (`python -m bench`, bench/__main__.py): what each Fivetran workload costs per
engine, as its table grows, beside the bare delta-rs baseline; also on the local cluster
(`--cluster`) and on each store's emulator (`--storage`).

runner.py (a whole run), workloads.py, steps.py (the processes and measured steps), sampling.py
(peak RSS, CPU), profiles.py + profile_server.py (pyinstrument), cluster.py, object_storage.py,
results.py, targets.py, plot.py, report.py (docs/benchmarks.md)."""
