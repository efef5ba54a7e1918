"""The destination server with pyinstrument around WriteBatch / WriteHistoryBatch / Truncate.

Started by bench/growth/profiles.py for the "Profiles" section (same arguments as
`python -m delta_destination.doors.fivetran.main`).  gRPC handlers run on pool threads and pyinstrument
samples the thread that starts it, so each call is profiled from inside its
handler; waiting on the embedded Sail engine shows up as time in the Spark
Connect client.  Each profile is written to $BENCH_PROFILE_DIR as
<label>.txt (text tree) and <label>.pyisession (for re-rendering), where
<label> is the call's `bench-label` gRPC metadata (or the method name).
"""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from pyinstrument import Profiler

from delta_destination.doors.fivetran import servicer

OUT = Path(os.environ.get("BENCH_PROFILE_DIR", "."))


def _wrap(name: str) -> None:
    orig = getattr(servicer.DestinationServicer, name)

    @functools.wraps(orig)
    def inner(self, request, context):
        label = dict(context.invocation_metadata()).get("bench-label", name)
        prof = Profiler(interval=0.002)
        prof.start()
        try:
            return orig(self, request, context)
        finally:
            prof.stop()
            OUT.mkdir(parents=True, exist_ok=True)
            (OUT / f"{label}.txt").write_text(prof.output_text(unicode=False, color=False, show_all=False))
            prof.last_session.save(str(OUT / f"{label}.pyisession"))

    setattr(servicer.DestinationServicer, name, inner)


for _m in ("WriteBatch", "WriteHistoryBatch", "Truncate"):
    _wrap(_m)

from delta_destination.doors.fivetran.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
