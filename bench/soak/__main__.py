"""`python -m bench.soak`: bench/soak/run.py."""
import sys

from .run import main

sys.exit(main())
