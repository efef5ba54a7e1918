"""Names that become path components or SQL identifiers.

Schema and table names become directories under the warehouse (spelled by
warehouse.path_component), so anything that could escape or alias a directory is
refused before any work: empty, `.`/`..`, path separators, control characters.
Any other name works: mixed case, spaces, dots, dashes, non-ASCII, reserved words.

Spark and Delta resolve column names case-insensitively, so two columns of one table
that differ only in case are refused (their values would mix); likewise two tables of
one schema (warehouse.Warehouse.case_twin).
"""
from __future__ import annotations

import unicodedata

from .errors import InvalidRequest, UnsafeName

# Names are encoded into path components of bounded length (warehouse.py); this only
# refuses absurd requests.
MAX_NAME_CHARS = 1024


def check_path_name(kind: str, name: str) -> str:
    if name is None or name == "":
        raise UnsafeName(f"{kind} name is empty")
    if name in (".", ".."):
        raise UnsafeName(f"{kind} name {name!r} is not allowed")
    if "/" in name or "\\" in name:
        raise UnsafeName(f"{kind} name {_show(name)} contains a path separator")
    if any(unicodedata.category(ch) == "Cc" for ch in name):
        raise UnsafeName(f"{kind} name {_show(name)} contains a control character")
    if len(name) > MAX_NAME_CHARS:
        raise UnsafeName(f"{kind} name is longer than {MAX_NAME_CHARS} characters")
    return name


def check_column_name(name: str) -> str:
    if name is None or name == "":
        raise InvalidRequest("column name is empty")
    if any(unicodedata.category(ch) == "Cc" for ch in name):
        raise InvalidRequest(f"column name {_show(name)} contains a control character")
    return name


def case_clash(names) -> tuple[str, str] | None:
    """The first two names that are equal ignoring case, e.g. ('id', 'ID') (or ('id', 'id')
    for an exact duplicate), or None."""
    seen: dict[str, str] = {}
    for n in names:
        key = n.casefold()
        if key in seen:
            return seen[key], n
        seen[key] = n
    return None


def quote_ident(name: str) -> str:
    """Spark SQL identifier quoting: backticks, doubled inside."""
    return "`" + name.replace("`", "``") + "`"


def quote_string(value: str) -> str:
    """Spark SQL string literal (backslash escapes are on by default in Spark SQL)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _show(name: str) -> str:
    # Names are metadata, not customer values; still keep them printable in logs.
    return repr(name.encode("unicode_escape").decode("ascii"))[:120]
