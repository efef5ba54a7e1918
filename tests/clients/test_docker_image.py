"""The Docker image, checked without a container engine (none runs where the tests run): what the
Dockerfile alone can tell. Every path it COPYs is in a fresh clone, its entry point is a console script
the package installs, and its install step is `make install-python`, which, in a folder holding only
what the image copies, finds every file it needs and plans the very commands it plans in the checkout
(make's dry run). The image itself was last built and run by hand (docs/development.md)."""
from __future__ import annotations

import json
import os
import posixpath
import shlex
import shutil
import subprocess
import tomllib

from testkit.server_process import ROOT


def _instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined."""
    out, pending = [], ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, args = pending.strip().partition(" ")
        out.append((keyword.upper(), args.strip()))
        pending = ""
    return out


def _copies() -> list[tuple[str, str]]:
    """Every COPY as (source, where it lands relative to the WORKDIR), flags such as --chown left out."""
    out = []
    for keyword, args in _instructions():
        if keyword == "COPY":
            *sources, target = [w for w in shlex.split(args) if not w.startswith("--")]
            into = target.endswith("/") or len(sources) > 1
            out += [(s, posixpath.normpath(posixpath.join(target, posixpath.basename(s)) if into else target))
                    for s in sources]
    return out


def _tracked(path: str) -> list[str]:
    """The files git tracks at or under `path`: what a fresh clone has there."""
    out = subprocess.run(["git", "ls-files", "-z", "--", path], cwd=ROOT, capture_output=True, check=True).stdout
    return [n for n in out.decode().split("\0") if n]


def _install_command() -> list[str]:
    """The `make ...` part of the RUN instruction that installs."""
    found = [part.split() for keyword, args in _instructions() if keyword == "RUN"
             for part in args.split("&&") if part.split()[:1] == ["make"]]
    assert len(found) == 1, found
    return found[0]


def _dry_run(cwd, make_args) -> list[str]:
    """The commands `make` would run for `make_args` from scratch (-B: as if nothing were built). Run
    from `make test-all` this make is a sub-make: without the parent's MAKELEVEL/MAKEFLAGS it does
    not print "Entering directory" lines, which name the two folders and would differ."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}
    r = subprocess.run(["make", "--no-print-directory", "-n", "-B", *make_args], cwd=cwd, capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, f"make -n {' '.join(make_args)} in {cwd}: {r.stderr}"
    return r.stdout.splitlines()


def test_every_copied_path_is_in_a_fresh_clone():
    sources = [src for src, _ in _copies()]
    assert "pyproject.toml" in sources and "delta_destination" in sources
    for src in sources:
        assert _tracked(src), f"the Dockerfile copies {src}, which git does not track (a clone has no such path)"


def test_entry_point_is_a_console_script_of_the_package():
    entry = [json.loads(args) for keyword, args in _instructions() if keyword == "ENTRYPOINT"]
    assert len(entry) == 1, entry
    program = entry[0][0]
    assert program.startswith("/app/.venv/bin/"), program
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert program.rsplit("/", 1)[1] in scripts, (program, sorted(scripts))


def test_install_step_is_make_install_python_on_the_copied_files(tmp_path):
    """The image's install is the Makefile's own target, and the files the image holds are enough
    for it: the same dry run there as in the checkout (a prerequisite the image lacks makes make
    fail with "No rule to make target")."""
    make = _install_command()
    assert make[1] == "install-python", make
    image = tmp_path / "app"
    image.mkdir()
    for src, dest in _copies():
        for name in _tracked(src):
            there = image / dest / posixpath.relpath(name, src) if name != src else image / dest
            there.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, there)
    planned = _dry_run(image, make[1:])
    assert any("pip install" in line for line in planned), planned
    assert any("grpc_tools.protoc" in line for line in planned), planned
    assert planned == _dry_run(ROOT, make[1:])
