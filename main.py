"""Entry point of the binary Fivetran builds (`pyinstaller --onefile main.py` -> `dist/main --port N`).

Fivetran's pipeline for Python destinations runs `./build.sh`, installs requirements.txt,
then PyInstaller on this file, with no configuration of ours. PyInstaller finds modules
by following imports; the data files it cannot find that way are restored first
(delta_destination/frozen).
"""
import sys

from delta_destination import frozen

if sys.argv[1:2] == ["sail-engine"]:
    # The binary started again as the destination's embedded engine (engines/sail_engine.py):
    # a normal installation runs `python -m delta_destination.engines.sail_engine` instead.
    from delta_destination.engines.sail_engine import main as engine_main

    sys.exit(engine_main(sys.argv[2:]))

frozen.prepare()

from delta_destination.doors.fivetran.main import main  # noqa: E402 - after frozen.prepare()

if __name__ == "__main__":
    sys.exit(main())
