"""The project's benchmarks, run as modules (`python -m bench.soak`); results go to docs/."""
