"""Names that become path components or SQL identifiers.

Schema and table names become directories `<warehouse>/<schema>/<table>`, so
anything that could escape or alias a directory is refused before any work.
"""
from __future__ import annotations

import unicodedata

from .errors import InvalidRequest, UnsafeName

MAX_NAME_BYTES = 255  # common filesystem limit for one path component


def check_path_name(kind: str, name: str) -> str:
    if name is None or name == "":
        raise UnsafeName(f"{kind} name is empty")
    if name in (".", ".."):
        raise UnsafeName(f"{kind} name {name!r} is not allowed")
    if "/" in name or "\\" in name:
        raise UnsafeName(f"{kind} name {_show(name)} contains a path separator")
    if any(unicodedata.category(ch) == "Cc" for ch in name):
        raise UnsafeName(f"{kind} name {_show(name)} contains a control character")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise UnsafeName(f"{kind} name is longer than {MAX_NAME_BYTES} bytes")
    return name


def check_column_name(name: str) -> str:
    if name is None or name == "":
        raise InvalidRequest("column name is empty")
    if any(unicodedata.category(ch) == "Cc" for ch in name):
        raise InvalidRequest(f"column name {_show(name)} contains a control character")
    return name


def quote_ident(name: str) -> str:
    """Spark SQL identifier quoting: backticks, doubled inside."""
    return "`" + name.replace("`", "``") + "`"


def quote_string(value: str) -> str:
    """Spark SQL string literal (backslash escapes are on by default in Spark SQL)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _show(name: str) -> str:
    # Names are metadata, not customer values; still keep them printable in logs.
    return repr(name.encode("unicode_escape").decode("ascii"))[:120]
