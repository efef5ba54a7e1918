"""Notices: things the customer should know although the request succeeded.

Fivetran shows a response's `warning` to the customer and lets the sync go on (a Task
stops it); other doors have their own channel. The core does not know any of them: it
calls `notice(...)` where the thing happens, and a door collects what one request
produced with `collecting()` and answers it in its one place. Like error messages,
notices name tables and columns, never values.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Iterator, Optional

from .. import logs

log = logs.get(__name__)
_current: contextvars.ContextVar[Optional[list[str]]] = contextvars.ContextVar("delta_notices", default=None)


def notice(message: str) -> None:
    """Record a notice for the request being served (logged as a warning either way)."""
    log.warning(message)
    notes = _current.get()
    if notes is not None and message not in notes:
        notes.append(message)


@contextmanager
def collecting() -> Iterator[list[str]]:
    """The notices recorded inside the block (this thread/context only)."""
    notes: list[str] = []
    token = _current.set(notes)
    try:
        yield notes
    finally:
        _current.reset(token)
