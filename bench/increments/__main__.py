"""`python -m bench.increments`: bench/increments/run.py."""
import sys

from .run import main

sys.exit(main())
