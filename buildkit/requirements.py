"""requirements.txt is generated from pyproject.toml: `python -m buildkit.requirements > requirements.txt`.

pyproject.toml is the one source of truth for the direct runtime dependencies. Fivetran's
build pipeline installs requirements.txt before PyInstaller, so that file pins the whole
runtime closure (direct and transitive, no dev extras) at the versions the project's venv
resolved. tests/clients/test_build_pipeline.py fails when the two drift apart (a dependency added,
removed or re-pinned in pyproject.toml without regenerating requirements.txt).
"""
from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
HEADER = ("# Generated from pyproject.toml by `python -m buildkit.requirements > requirements.txt`; do not edit.\n"
          "# Every runtime dependency (direct and transitive) pinned, for Fivetran's PyInstaller build.\n")


def direct_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[Requirement]:
    data = tomllib.loads(pyproject.read_text())
    return [Requirement(r) for r in data["project"]["dependencies"]]


def _applies(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    env = default_environment()
    if not extras:
        return req.marker.evaluate({**env, "extra": ""})
    return any(req.marker.evaluate({**env, "extra": e}) for e in extras)


def _walk(direct: list[Requirement]):
    """Every (requirement, who asked) reachable from the direct requirements, following the
    installed packages' metadata."""
    todo = [(r, set(r.extras), "pyproject.toml") for r in direct if _applies(r, set())]
    seen: set[tuple[str, frozenset]] = set()
    while todo:
        req, extras, asker = todo.pop()
        yield req, asker
        name = canonicalize_name(req.name)
        if (name, frozenset(extras)) in seen:
            continue
        seen.add((name, frozenset(extras)))
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue  # not installed: reported as unpinned by problems(), cannot be followed
        for text in dist.requires or []:
            sub = Requirement(text)
            if _applies(sub, extras):
                todo.append((sub, set(sub.extras), name))


def runtime_closure(direct: list[Requirement]) -> dict[str, str]:
    """canonical name -> installed version of every package the direct requirements pull in."""
    return {canonicalize_name(r.name): metadata.distribution(r.name).version for r, _ in _walk(direct)}


def problems(pinned: dict[str, str], direct: list[Requirement]) -> list[str]:
    """Why `pinned` is not a complete, consistent lock of the runtime closure: a package
    missing or extra, or a pin outside what pyproject.toml or a dependent asks for. (A lock
    older than today's resolution is fine: builds stay reproducible.)"""
    out = []
    wanted = set()
    for req, asker in _walk(direct):
        name = canonicalize_name(req.name)
        wanted.add(name)
        if name in pinned and not req.specifier.contains(pinned[name], prereleases=True):
            out.append(f"{name}=={pinned[name]} does not satisfy {asker}'s {req}")
    out += [f"{n} is needed at run time but not pinned" for n in sorted(wanted - set(pinned))]
    out += [f"{n} is pinned but nothing needs it" for n in sorted(set(pinned) - wanted)]
    return out


def render(pinned: dict[str, str]) -> str:
    return HEADER + "".join(f"{n}=={v}\n" for n, v in sorted(pinned.items()))


def parse(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.+!\-]+)", line)
        if not m:
            raise ValueError(f"requirements.txt line is not an exact pin: {line!r}")
        out[canonicalize_name(m.group(1))] = m.group(2)
    return out


if __name__ == "__main__":
    sys.stdout.write(render(runtime_closure(direct_requirements())))
