"""Sections of docs/benchmarks.md that a benchmark rewrites on its own (the rest of the file is kept)."""
from __future__ import annotations

from pathlib import Path


def splice(path: Path, lines: list[str]) -> None:
    """Put a section (its first line is its `## ` heading) into an existing report: in place of an
    earlier one, else before `## Growth` or `## Machine`, else at the end."""
    old = path.read_text().splitlines() if path.exists() else []
    heading = lines[0]
    if heading in old:
        i = old.index(heading)
        j = next((k for k in range(i + 1, len(old)) if old[k].startswith("## ")), len(old))
        new = old[:i] + lines + old[j:]
    else:
        i = next((k for k, x in enumerate(old) if x in ("## Growth", "## Machine")), len(old))
        new = old[:i] + lines + old[i:]
    path.write_text("\n".join(new) + "\n")
