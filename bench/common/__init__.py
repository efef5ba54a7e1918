"""What several benchmarks share: the workloads' batch files (data.py) and the calls that send them
(rpc.py), the bare baselines they are measured against (baseline.py: delta-rs; floor.py: the bare
libraries), the small batches Fivetran mostly sends (small_batches.py), a process tree's memory
(process_memory.py), what a long-running door's run measures (door_measures.py: latency, its
metrics endpoint, engine replacements), and splicing one section into docs/benchmarks.md
(report_sections.py)."""
