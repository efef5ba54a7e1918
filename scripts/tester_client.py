#!/usr/bin/env python
"""Drive a running destination like Fivetran's destination tester (testkit/tester/, same as
`python -m testkit.tester`).

    .venv/bin/python scripts/tester_client.py --port 50052 --warehouse ./warehouse \
        --input testdata/fivetran-tester-inputs/input.json --migrations
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testkit.tester.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
