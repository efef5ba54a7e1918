"""`python -m bench.sync`: bench/sync/run.py."""
import sys

from .run import main

sys.exit(main())
