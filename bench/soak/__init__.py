"""The soak (`python -m bench.soak`, make bench-soak): memory over time, latency and engine restarts
of one long-running process per door fed thousands of small batches. run.py (the Fivetran door and
the command line), doors.py (Airbyte, Conduit), report.py (its docs/benchmarks.md section and plot)."""
