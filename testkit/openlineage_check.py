"""Validating OpenLineage events offline against the spec's JSON Schemas (shared by the tests
of every door). The schemas are vendored in testdata/openlineage-spec/ (PROVENANCE.md there;
each file's "$id" is its canonical URL, so a registry keyed
by "$id" resolves every cross-file $ref without network). The core schema checks facets only
as BaseFacet, so each facet is also validated against the schema its `_schemaURL` names.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterable, Iterator

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from delta_destination.lineage.openlineage_events import COMMIT_FACET_SCHEMA

from .server_process import TESTDATA

SPEC = TESTDATA / "openlineage-spec"


def _registry() -> tuple[Registry, str]:
    core = json.loads((SPEC / "OpenLineage.json").read_text())
    docs = [core, COMMIT_FACET_SCHEMA, *(json.loads(p.read_text()) for p in sorted((SPEC / "facets").glob("*.json")))]
    reg = Registry().with_resources([(d["$id"], Resource.from_contents(d)) for d in docs])
    return reg, core["$id"]


class EventValidator:
    def __init__(self):
        if not (SPEC / "OpenLineage.json").is_file():
            raise FileNotFoundError(f"the OpenLineage spec copy is missing: {SPEC}")
        self.registry, self.core_id = _registry()

    def _validator(self, ref: str) -> Draft202012Validator:
        return Draft202012Validator({"$ref": ref}, registry=self.registry,
                                    format_checker=Draft202012Validator.FORMAT_CHECKER)

    def errors(self, event: dict) -> list[str]:
        out = [f"event: {e.message} at {list(e.absolute_path)}"
               for e in self._validator(self.core_id + "#/$defs/RunEvent").iter_errors(event)]
        for where, key, facet in facets_of(event):
            url = facet.get("_schemaURL", "")
            if not url:
                out.append(f"{where}.{key}: no _schemaURL")
                continue
            try:
                errs = list(self._validator(url).iter_errors(facet))
                base = url.split("#")[0]
                top = self.registry.get_or_retrieve(base).value.contents.get("properties") or {}
                if key not in top:
                    out.append(f"{where}.{key}: the key is not the one {base} defines ({sorted(top)})")
            except Exception as exc:  # noqa: BLE001 - unknown schema URL
                out.append(f"{where}.{key}: cannot resolve {url} ({type(exc).__name__})")
                continue
            out += [f"{where}.{key}: {e.message} at {list(e.absolute_path)}" for e in errs]
        return out


def facets_of(event: dict) -> Iterator[tuple[str, str, dict]]:
    for key, f in ((event.get("run") or {}).get("facets") or {}).items():
        yield "run.facets", key, f
    for key, f in ((event.get("job") or {}).get("facets") or {}).items():
        yield "job.facets", key, f
    for side in ("inputs", "outputs"):
        for i, ds in enumerate(event.get(side) or []):
            for group in ("facets", "inputFacets", "outputFacets"):
                for key, f in (ds.get(group) or {}).items():
                    yield f"{side}[{i}].{group}", key, f


def read_events(path: Path) -> list[dict]:
    """A file transport's log (append mode: one JSON event per line)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def runs(events: Iterable[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for e in events:
        out.setdefault(e["run"]["runId"], []).append(e)
    return out


def wait_for(items, count, timeout=20.0):
    """items() once it holds at least `count` entries (lineage is sent in the background)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = items()
        if len(got) >= count:
            return got
        time.sleep(0.1)
    return items()
