"""Names that become path components or SQL identifiers: which are refused, and how they are spelled.

Schema and table names become directories under the warehouse (spelled by
`path_component`), so anything that could escape or alias a directory is
refused before any work: empty, `.`/`..`, path separators, control characters.
Any other name works: mixed case, spaces, dots, dashes, non-ASCII, reserved words.

A directory name is spelled from the Fivetran name: ASCII letters, digits, `_`, `-` and `.`
stay as they are (so `orders`, `Order_Items-2024.v1` are their own directory names); every
other character, and a leading `.`, becomes `=XX` per UTF-8 byte (quoted-printable style:
`Order Items` -> `Order=20Items`, `Größe` -> `Gr=C3=B6=C3=9Fe`, `a=b` -> `a=3Db`). The
result is injective, readable, and never depends on how an engine escapes paths: it holds
only characters that Sail, Apache Spark/Hadoop and object stores all take literally
(Sail percent-encodes spaces and non-ASCII, treats `?`, `#`, `*`, `{` specially).
A spelled name longer than MAX_COMPONENT characters keeps a readable prefix and ends in
`==` + a hash of the name ignoring case + a hash of the exact name (still injective,
and case twins stay detectable). Where the spelled names go is the warehouse's
(warehouse.py); tables created before this spelling are still found (core/table_dirs.py).

Spark and Delta resolve column names case-insensitively, so two columns of one table
that differ only in case are refused (their values would mix); likewise two tables of
one schema (core/table_dirs.case_twin).
"""
from __future__ import annotations

import hashlib
import unicodedata
from typing import Optional

from .errors import InvalidRequest, UnsafeName

# Names are encoded into path components of bounded length (path_component); this only
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


_LITERAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
ESCAPE = "="
HASHED = "=="  # cannot occur in a spelled name: every "=" there is followed by two hex digits
MAX_COMPONENT = 255  # characters (= bytes: all ASCII), the usual filesystem limit per component
_PREFIX = 200


def path_component(name: str) -> str:
    """
    >>> path_component("Order Items"), path_component(".x"), path_component("a=b")
    ('Order=20Items', '=2Ex', 'a=3Db')
    """
    out = []
    for i, ch in enumerate(name):
        if ch in _LITERAL and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.extend(f"{ESCAPE}{b:02X}" for b in ch.encode("utf-8"))
    spelled = "".join(out)
    if len(spelled) <= MAX_COMPONENT:
        return spelled
    prefix = spelled[:_PREFIX]
    cut = prefix.rfind(ESCAPE, _PREFIX - 2)  # never split an "=XX"
    if cut != -1:
        prefix = prefix[:cut]
    return prefix + HASHED + _digest(name.casefold()) + _digest(name)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def name_of_component(component: str) -> Optional[str]:
    """The name a directory spells, or None (a hashed long name, or not our spelling)."""
    if HASHED in component:
        return None
    data, i = bytearray(), 0
    while i < len(component):
        ch = component[i]
        if ch == ESCAPE:
            try:
                data.append(int(component[i + 1:i + 3], 16))
            except ValueError:
                return None
            i += 3
        elif ch in _LITERAL:
            data += ch.encode("ascii")
            i += 1
        else:
            return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def same_ignoring_case(component: str, name: str) -> bool:
    """Does the directory `component` hold a name equal to `name` ignoring case?"""
    mine = path_component(name)
    if HASHED in component or HASHED in mine:
        return HASHED in component and HASHED in mine and \
            component.split(HASHED)[1][:16] == mine.split(HASHED)[1][:16]
    other = name_of_component(component)
    return other is not None and other.casefold() == name.casefold()


def _show(name: str) -> str:
    # Names are metadata, not customer values; still keep them printable in logs.
    return repr(name.encode("unicode_escape").decode("ascii"))[:120]
