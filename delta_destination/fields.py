"""What one setting is: its declaration (`Field`: key, type, default, scope, secret) and how a value
given for it becomes a value of its type.

It sits below settings.py and storage/ because both declare settings: each store's module declares
its own fields (storage/s3.py, azure.py, gcs.py), and settings.FIELDS gathers them with the rest.
Every parse and every default of a setting is derived from its Field, so that a default is written
once, in its declaration.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from .errors import InvalidRequest

TEXT, CHOICE, NUMBER, BOOL = "text", "choice", "number", "bool"
# Which surfaces show a field: per-connection settings go everywhere; runtime settings on every
# door's process (the server's command line, an Airbyte config, a Conduit connector's settings;
# not Fivetran's per-connection form); process settings only on the server's command line.
CONNECTION, RUNTIME, PROCESS = "connection", "runtime", "process"


@dataclass(frozen=True)
class Field:
    key: str
    label: str
    help: str
    kind: str = TEXT
    default: str = ""
    choices: tuple[str, ...] = ()
    secret: bool = False
    env: str = ""                 # read when the setting is empty
    aliases: tuple[str, ...] = ()  # older spellings accepted on input
    placeholder: str = ""
    scope: str = CONNECTION
    minimum: Optional[float] = None
    integer: bool = False          # a NUMBER that is a count (an int), not a quantity (a float)
    # A parse of its own where the kind's is not enough (its messages, or a rule beyond a minimum).
    parser: Optional[Callable[[Any], Any]] = None

    @property
    def flag(self) -> Optional[str]:
        """The command-line flag (`--spark-remote`), None for secrets."""
        return None if self.secret else "--" + self.key.replace("_", "-")

    @property
    def default_value(self) -> Any:
        """The declared default as a value of the field's type (None: the field has none).
        >>> Field("n", "", "", kind=NUMBER, default="50", integer=True).default_value
        50
        >>> Field("n", "", "", kind=NUMBER).default_value is None, Field("t", "", "").default_value
        (True, '')
        """
        if self.kind in (NUMBER, BOOL) and self.default == "":
            return None
        return self.parse(self.default)

    def parse(self, value: Any) -> Any:
        """A given value as the field's type; messages name the key, never the value.

        TEXT: the stripped string (None: ''). CHOICE: lower case, one of `choices` ('' = not given). NUMBER:
        a float (an int when `integer`), at least `minimum`. BOOL: True or False, None for `auto`
        or empty.
        >>> Field("n", "", "", kind=NUMBER, minimum=0).parse(" 2.5 "), Field("b", "", "", kind=BOOL).parse("on")
        (2.5, True)
        >>> Field("e", "", "", kind=CHOICE, choices=("a", "b")).parse("C")
        Traceback (most recent call last):
        ...
        delta_destination.errors.InvalidRequest: e must be one of a, b
        """
        if self.parser is not None:
            return self.parser(value)
        if self.kind == NUMBER:
            return self._number(value)
        if self.kind == BOOL:
            return parse_bool(self.key, value)
        text = value.strip() if isinstance(value, str) else "" if value is None else str(value)
        if self.kind == CHOICE:
            text = text.lower()
            if text and text not in self.choices:
                raise InvalidRequest(f"{self.key} must be one of {', '.join(self.choices)}")
        return text

    def _number(self, value: Any):
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise InvalidRequest(f"{self.key} must be a number") from None
        if isinstance(value, bool) or (self.minimum is not None and number < self.minimum):
            least = f" of at least {self.minimum:g}" if self.minimum is not None else ""
            raise InvalidRequest(f"{self.key} must be a number{least}")
        return int(number) if self.integer else number


def parse_bool(key: str, value: Any) -> Optional[bool]:
    """`auto` or empty: not set.
    >>> parse_bool("x", "True"), parse_bool("x", "auto"), parse_bool("x", False)
    (True, None, False)
    """
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("", "auto"):
        return None
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise InvalidRequest(f"{key} must be true or false")
