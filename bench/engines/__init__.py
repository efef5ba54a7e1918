"""Experiments on one engine, each run on its own (`python -m bench.engines.<module>`): where a
long-running destination's memory goes (engine_memory.py), Sail's MERGE memory against the target's
size (sail_merge_memory.py), where a keyed upsert's time goes on local Spark (spark_merge_profile.py),
what each statement of a small request costs on Spark (spark_statements.py)."""
