"""The vendored third-party folders hold exactly the upstream bytes their PROVENANCE.md names: every
file listed in SHA256SUMS is there with that digest, and nothing else is (a file edited by hand, or added
beside them, would pass for upstream's)."""
from __future__ import annotations

import hashlib

import pytest

from testkit.server_process import ROOT

VENDORED = ["testdata/fivetran-tester-inputs", "testdata/openlineage-spec", "proto/conduit"]


@pytest.mark.parametrize("folder", VENDORED)
def test_vendored_files_match_their_checksums(folder):
    base = ROOT / folder
    assert (base / "PROVENANCE.md").is_file()
    listed = {}
    for line in (base / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name.removeprefix("./")] = digest
    assert listed
    for name, digest in listed.items():
        assert hashlib.sha256((base / name).read_bytes()).hexdigest() == digest, f"{folder}/{name} changed"
    if folder.startswith("testdata/"):  # proto/conduit's sums cover its .proto files, beside its licences
        present = {p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file()}
        assert present - {"PROVENANCE.md", "SHA256SUMS"} == set(listed)
