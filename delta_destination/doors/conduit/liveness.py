"""Is the host (Conduit) still there? The connector commits only while it is.

Conduit re-sends every record it has not seen acked, so a connector whose host is gone must
not commit what it still holds: the acks could not be sent, and a restarted Conduit sends the
same keys to a new connector, whose newer values a late commit would overwrite (docs/conduit.md,
"When Conduit dies, restarts or falls behind").

- The parent's death ends the process at once: the kernel SIGKILLs it (PR_SET_PDEATHSIG, Linux),
  and a watchdog that compares getppid() with the parent the process started with does the same
  where the kernel cannot (or if its signal was missed). Like a kill -9 of the connector: a
  commit in flight fails atomically, nothing buffered is written.
- Other signs (the Run stream ended without Stop, go-plugin's broker stream ended) mark the host
  *gone*: the pipeline drops what it holds, the guard refuses every further commit, and the
  process exits a little later (after answering Teardown/Shutdown if they still come).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Callable, Optional

from ... import logs

log = logs.get(__name__)

PR_SET_PDEATHSIG = 1
WATCH_INTERVAL = 0.2          # seconds between two getppid() checks
NO_PDEATHSIG_ENV = "CONDUIT_DELTA_TEST_NO_PDEATHSIG"   # test-only: exercise the watchdog alone
PAUSE_ENV = "CONDUIT_DELTA_TEST_PAUSE_AT"                # test-only: stop this process at a named point


def die_with_parent(env: dict) -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies. False where it cannot
    (not Linux, or switched off for a test): the watchdog is then the only guard."""
    if env.get(NO_PDEATHSIG_ENV) or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class HostWatch:
    """The host's liveness as the connector sees it. `alive()` is what the guard asks right
    before a commit; `gone` is set once and never cleared."""

    def __init__(self, parent_pid: int, exit_now: Callable[[int], None] = os._exit):
        self.parent_pid = parent_pid
        self.gone = threading.Event()
        self.reason = ""
        self._exit_now = exit_now
        self._listeners: list[Callable[[str], None]] = []
        self._stream_active: Callable[[], bool] = lambda: True
        self._ending = threading.Event()      # Teardown came: the host's leaving is expected
        self._lock = threading.Lock()

    # ---- signals --------------------------------------------------------------------------
    def parent_alive(self) -> bool:
        return os.getppid() == self.parent_pid

    def mark_gone(self, reason: str) -> None:
        with self._lock:
            if self.gone.is_set():
                return
            self.reason = reason
            self.gone.set()
            listeners = list(self._listeners)
        if self._ending.is_set():
            log.info(f"the host ended the connection ({reason}) after Teardown")
        else:
            log.warning(f"the host is gone ({reason}): buffered records are dropped, nothing more is committed")
        for fn in listeners:
            fn(reason)

    def expect_end(self) -> None:
        """Teardown came: the host will close the connection next (go-plugin's Kill)."""
        self._ending.set()

    def on_gone(self, fn: Callable[[str], None]) -> None:
        with self._lock:
            self._listeners.append(fn)
            already = self.gone.is_set()
        if already:
            fn(self.reason)

    def watch_stream(self, active: Callable[[], bool]) -> None:
        """The Run stream the acks travel on (its gRPC context's is_active)."""
        self._stream_active = active

    def alive(self) -> Optional[str]:
        """None while the host can still receive acks, else why not."""
        if self.gone.is_set():
            return self.reason
        if not self.parent_alive():
            return "the parent process died"
        if not self._stream_active():
            return "the Run stream is closed"
        return None

    # ---- the watchdog -----------------------------------------------------------------------
    def start_watchdog(self) -> threading.Thread:
        t = threading.Thread(target=self._watch, name="conduit-host-watch", daemon=True)
        t.start()
        return t

    def _watch(self) -> None:
        while True:
            if not self.parent_alive():
                # Exactly what PR_SET_PDEATHSIG does where the kernel offers it: end now, so no
                # commit can start after the host died and one in flight fails atomically.
                sys.stderr.write('{"@level": "warn", "@message": "the parent process died: exiting now"}\n')
                sys.stderr.flush()
                self._exit_now(1)
                return
            time.sleep(WATCH_INTERVAL)


def pause_point(name: str, env: Optional[dict] = None) -> None:
    """Test-only: when CONDUIT_DELTA_TEST_PAUSE_AT names this point (`name` or `name#N` for its
    N-th pass), the process stops itself (SIGSTOP) here, so a test can make a race happen in
    exactly this order and resume it with SIGCONT."""
    spec = (env if env is not None else os.environ).get(PAUSE_ENV, "")
    if not spec:
        return
    want, _, nth = spec.partition("#")
    if want != name:
        return
    with _PASSES_LOCK:
        _PASSES[name] = _PASSES.get(name, 0) + 1
        hit = _PASSES[name] == (int(nth) if nth else 1)
    if hit:
        log.warning(f"test pause point {name!r} reached: stopping this process (SIGSTOP)")
        # To this thread, not the process: a process-directed SIGSTOP is taken by whichever thread
        # the kernel picks (the main one), and until that thread gets a CPU this one runs on -- on a
        # busy machine far enough to pass the guard and send its statement, which made the race
        # the tests stage happen in the other order. A thread-directed stop is taken by this
        # thread on its way out of the syscall, so nothing after this line runs before SIGCONT.
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


_PASSES: dict[str, int] = {}
_PASSES_LOCK = threading.Lock()
