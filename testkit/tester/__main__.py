"""`python -m testkit.tester ...`: see testkit/tester/cli.py."""
import sys

from .cli import main

sys.exit(main())
