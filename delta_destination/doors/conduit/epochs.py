"""Writer epochs: a later instance of a Conduit connector owns a table from its claim on, and
an earlier instance's late commit is refused (docs/conduit.md, "Writer epochs").

The epoch is a Delta table property per Conduit connector, `conduit.epoch.<connector id>`, whose
value `<epoch, 12 digits>-<instance>` only grows. An instance claims a table (one commit of its
own) before its first write to it; the guard checks, right before each commit, that the
table's current value is still its own token.
"""
from __future__ import annotations

import os
import secrets
from typing import Callable, Optional

from ... import logs
from ...errors import DestinationError
from .errors import Superseded

log = logs.get(__name__)

PREFIX = "conduit.epoch."
CLAIM_ATTEMPTS = 5


def epoch_key(connector_id: str) -> str:
    """The property of one Conduit connector (`pipeline:connector`); other connectors writing
    the same table keep epochs of their own and never refuse each other."""
    return PREFIX + (connector_id or "unnamed")


def new_instance_tag() -> str:
    return f"{os.getpid()}.{secrets.token_hex(4)}"


def token(epoch: int, instance: str) -> str:
    """The claim token: zero-padded so that tokens compare as text in epoch order.

    >>> token(7, "123.ab")
    '000000000007-123.ab'
    """
    return f"{epoch:012d}-{instance}"


def epoch_of(value: Optional[str]) -> int:
    """The epoch of a token; no token or a foreign value counts as epoch 0 (never claimed).

    >>> epoch_of('000000000007-123.ab'), epoch_of(None), epoch_of('junk')
    (7, 0, 0)
    """
    head = (value or "").partition("-")[0]
    return int(head) if head.isdigit() else 0


# ---- claims and checks ------------------------------------------------------------------------
class Epochs:
    """This instance's claims. `current(table)` is the table's current token (the core reads it
    from the table's log without taking the table's lock: the guard runs while the writer holds
    it); `set_value(table, value)` commits a new value (a claim)."""

    def __init__(self, connector_id: str, current: Callable[[str], Optional[str]],
                 set_value: Callable[[str, str], None], instance: Optional[str] = None):
        self.key = epoch_key(connector_id)
        self.instance = instance or new_instance_tag()
        self.current = current
        self.set_value = set_value
        self.mine: dict[str, str] = {}           # table -> our token

    def owner(self, table: str) -> Optional[str]:
        return self.current(table)

    def claimed(self, table: str) -> bool:
        return table in self.mine

    def claim(self, table: str, display: str) -> str:
        """Make this instance the table's writer (a commit of its own). Raises Superseded when
        other claims keep landing in between (two live instances fighting over a table)."""
        for _ in range(CLAIM_ATTEMPTS):
            current = self.owner(table)
            mine = token(epoch_of(current) + 1, self.instance)
            self.set_value(table, mine)
            now = self.owner(table)
            if now == mine:
                self.mine[table] = mine
                log.info(f"{display}: writer epoch {epoch_of(mine)} claimed (previous {epoch_of(current)})")
                return mine
            log.warning(f"{display}: another instance claimed the table at the same time; claiming again")
        raise Superseded(f"another instance of this connector keeps claiming table {display} at the same time")

    def check(self, table: str, display: str) -> None:
        """The guard's half about ordering: refuse unless our claim is still the table's newest."""
        mine = self.mine.get(table)
        if mine is None:
            raise DestinationError(f"table {display} was about to be written before this instance claimed it")
        now = self.owner(table)
        if now != mine:
            raise Superseded(f"a newer instance of this connector took the table over (writer epoch "
                             f"{epoch_of(now)}, this instance has {epoch_of(mine)})")
