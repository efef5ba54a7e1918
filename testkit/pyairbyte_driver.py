"""Runs INSIDE the PyAirbyte virtualenv (not ours): one PyAirbyte `destination.write(source)` of
source-faker into our command, both as local executables. Prints one JSON line with what
PyAirbyte saw. Usage: <pyairbyte python> pyairbyte_driver.py '<json args>'

Args: destination, faker, dest_config, faker_config, streams, strategy (merge|append|replace|auto),
cache (false = messages passed straight through; true = PyAirbyte's default DuckDB cache replay),
state_dir (PyAirbyte's caches live there; each test gets its own), keep_state (false: state_cache=False).
"""
import json
import os
import sys

os.environ["AIRBYTE_OFFLINE_MODE"] = "1"  # before importing airbyte: no registry look-ups
os.environ["DO_NOT_TRACK"] = "1"          # no usage reporting


def main() -> int:
    args = json.loads(sys.argv[1])
    os.chdir(args["state_dir"])  # PyAirbyte's default cache/state files go under the working dir
    import airbyte as ab
    from airbyte.strategies import WriteStrategy

    source = ab.get_source("source-faker", config=args["faker_config"], streams=args["streams"],
                           local_executable=args["faker"])
    dest = ab.get_destination("destination-delta", config=args["dest_config"], local_executable=args["destination"])
    dest.check()
    kwargs = {"write_strategy": WriteStrategy(args["strategy"])}
    if not args.get("cache"):
        kwargs["cache"] = False
    if not args.get("keep_state"):
        kwargs["state_cache"] = False  # every run reads the whole source again
    result = dest.write(source, **kwargs)
    print(json.dumps({"ok": True, "result": type(result).__name__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
