"""Makes generated protocol stubs import each other relative to their package (a build step, run
right after protoc: `python -m buildkit.proto_imports DIR`).

protoc writes a stub's imports from the .proto import paths, as top-level imports: the vendored
Conduit protocol files import each other as `opencdc/v1/opencdc.proto`, so
`connector/v2/destination_pb2.py` gets `from opencdc.v1 import opencdc_pb2`; Fivetran's SDK protos
import `common.proto`, so `destination_sdk_pb2.py` gets `import common_pb2 as common__pb2`. The
stubs live inside the destination's package, so each such import is rewritten here into its
package-relative form (`from ...opencdc.v1 import opencdc_pb2`, `from . import common_pb2 as
common__pb2`): the stubs then load as part of the package, with no folder put on sys.path and no
alias in sys.modules, and the vendored .proto files stay byte for byte as published. Only imports
of what protoc generated into DIR are touched (its top-level folders and stub modules); everything
else protoc wrote stays as it is.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path


def relative_imports(text: str, depth: int, packages: frozenset[str], modules: frozenset[str] = frozenset()) -> str:
    """The module's text with its absolute imports of the generated packages and top-level stub
    modules made relative; `depth`: how many folders below the stubs' root the module is.
    >>> relative_imports("from opencdc.v1 import opencdc_pb2 as o\\nfrom google.protobuf import x\\n", 2,
    ...                  frozenset({"opencdc"}))
    'from ...opencdc.v1 import opencdc_pb2 as o\\nfrom google.protobuf import x\\n'
    >>> relative_imports("from plugin import grpc_controller_pb2 as g\\n", 1, frozenset({"plugin"}))
    'from ..plugin import grpc_controller_pb2 as g\\n'
    >>> relative_imports("import common_pb2 as common__pb2\\nimport grpc\\n", 0, frozenset(), frozenset({"common_pb2"}))
    'from . import common_pb2 as common__pb2\\nimport grpc\\n'
    """
    dots = "." * (depth + 1)
    if packages:
        pattern = re.compile(r"^from ((%s)(\.[\w.]+)?) import " % "|".join(map(re.escape, sorted(packages))), re.M)
        text = pattern.sub(lambda m: f"from {dots}{m.group(1)} import ", text)
    if modules:
        pattern = re.compile(r"^import (%s)\b" % "|".join(map(re.escape, sorted(modules))), re.M)
        text = pattern.sub(lambda m: f"from {dots} import {m.group(1)}", text)
    return text


def rewrite(root: Path) -> int:
    """Rewrites every stub under `root` in place; returns how many files changed."""
    packages = frozenset(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    modules = frozenset(p.stem for p in root.glob("*_pb2*.py"))
    changed = 0
    for path in sorted(root.rglob("*_pb2*.py*")):
        if path.suffix not in (".py", ".pyi"):
            continue
        text = path.read_text(encoding="utf-8")
        new = relative_imports(text, len(path.relative_to(root).parts) - 1, packages, modules)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed += 1
    return changed


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m buildkit.proto_imports DIR")
    print(f"{rewrite(Path(sys.argv[1]))} generated stubs in {sys.argv[1]} now import each other package-relatively")
