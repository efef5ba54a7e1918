"""What every door shares: opening the core for a door's process (runtime.py)."""
