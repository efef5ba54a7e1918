"""`python -m bench.iceberg`: bench/iceberg/run.py."""
import sys

from .run import main

sys.exit(main())
