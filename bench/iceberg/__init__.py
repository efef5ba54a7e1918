"""What Iceberg metadata costs per commit (`python -m bench.iceberg`; issue 38): run.py."""
