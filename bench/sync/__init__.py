"""The sync benchmark (`python -m bench.sync`, make bench-sync): many tables of small batches, 4 in
flight, on each deployment beside the bare floor (run.py)."""
