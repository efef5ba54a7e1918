"""Increments into big tables (`python -m bench.increments`, make bench-increments): what a small
WriteBatch reads, writes and costs as its table grows (run.py)."""
