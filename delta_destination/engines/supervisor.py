"""The embedded engine, supervised: its memory stays bounded however long the destination runs,
and its crash fails only the requests it was serving.

Sail 0.7.2 keeps memory for every statement it runs and never gives it back
(docs/engine-memory.md), so a destination that served it inside its own process grew by
~0.7 MiB per request, for weeks, until the machine killed it mid-sync; and a native crash of
the engine took every request of every table with it. Here each storage configuration has
one Sail process (sail_engine.py) at a time, the *current generation*:

- every request leases the current generation for as long as it uses the engine (a lease is
  what EnginePool.lease hands out), so a generation is never stopped under a running request;
- when a lease ends and the generation's resident memory is over its bound (`max_memory_bytes`,
  or one derived from its own size once warm: RecyclePolicy), or it has served `max_requests`, a
  new process is started in the background; once it listens it becomes current, new leases go to
  it, and the old one stops as soon as its last lease ends. That is an expected event (an INFO
  line with its cause, counted in the metrics); only one sooner than the bound's rule allows is a
  warning;
- when the current process has died (a crash, an OOM kill, kill -9), its requests in flight
  fail at once (their client does not retry a dead engine: session.py) and the next lease
  starts a new process.

Both engines write each table with Delta's own commits, so which process serves the next
request never matters to the data; a process keeps nothing but its sessions' table names (Sail
names each table it opens) and temporary views, which a request recreates. What it costs: a start of ~0.1-1 s on a thread
of its own every few hundred to few thousand requests, and the start-up of the first generation.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from .. import logs, metrics
from ..errors import EngineUnavailable
from ..settings import DEFAULT_ENGINE_MAX_MEMORY_MB as DEFAULT_BOUND_MB, DEFAULT_ENGINE_MEMORY_HEADROOM_MB, Runtime, default_of
from .sail import SailProcess

log = logs.get(__name__)

MIB = 2**20
# After a failed start of a replacement, the old generation keeps serving this long before the
# next try (a machine short of memory or processes should not be asked every request).
REPLACE_RETRY_SECONDS = 30.0
MEMORY, REQUESTS, CRASH = "memory", "requests", "crash"


@dataclass(frozen=True)
class RecyclePolicy:
    """When a supervised engine process is replaced (0 = no bound of that kind).

    A process passes a memory bound for two reasons: what Sail keeps per statement (which a
    replacement sheds), or a working set bigger than the bound (a fresh process holds a few MiB
    for every table it has written, and a big MERGE holds its tables): a replacement then grows
    back at once. So a process is never replaced for memory before it has served `min_requests`.

    Two kinds of bound:
    - fixed (`headroom_bytes` 0): `max_memory_bytes`. Its rule: a process passes it only after
      `min_requests`; one over it sooner says the bound sits below the working set (a warning).
    - derived (`headroom_bytes` > 0): each process's own size once warm (its resident memory when
      it has served `min_requests`: the tables it serves, loaded) plus `headroom_bytes`, never
      above `max_memory_bytes` (when set). Its rule: a healthy process grows by less than the
      headroom in `horizon` requests (Sail keeps ~0.3 MiB per small commit, docs/conduit.md), so it
      is replaced at most once per `horizon` requests; one replaced sooner grew faster than that
      (a leak, or tables whose working set grows), and says so in a warning. Either way a leak
      is contained: no process grows more than `headroom_bytes` past what it needed once warm."""

    max_memory_bytes: int = DEFAULT_BOUND_MB["fivetran"] * MIB
    max_requests: int = default_of("engine_max_requests")
    min_requests: int = 20
    headroom_bytes: int = DEFAULT_ENGINE_MEMORY_HEADROOM_MB["fivetran"] * MIB
    horizon: int = 500

    @property
    def derived(self) -> bool:
        return self.headroom_bytes > 0

    def bound(self, warm: Optional[int]) -> int:
        """The memory bound of a process whose size once warm was `warm` (None: not warm yet); 0 = none.
        >>> RecyclePolicy(max_memory_bytes=1000).bound(None), RecyclePolicy(max_memory_bytes=1000).bound(300)
        (1000, 1000)
        >>> d = RecyclePolicy(max_memory_bytes=1000, headroom_bytes=200)
        >>> d.bound(None), d.bound(300), d.bound(900), RecyclePolicy(max_memory_bytes=0, headroom_bytes=200).bound(300)
        (1000, 500, 1000, 500)
        """
        if not self.derived or warm is None:
            return self.max_memory_bytes
        derived = warm + self.headroom_bytes
        return min(derived, self.max_memory_bytes) if self.max_memory_bytes else derived

    def cause(self, resident: Optional[int], requests: int, warm: Optional[int] = None) -> Optional[str]:
        """Why a process that has served `requests` with `resident` bytes should be replaced now.
        >>> p = RecyclePolicy(max_memory_bytes=100, max_requests=30)
        >>> p.cause(150, 25), p.cause(150, 3), p.cause(50, 30), p.cause(50, 3), p.cause(None, 3)
        ('memory', None, 'requests', None, None)
        >>> d = RecyclePolicy(max_memory_bytes=0, headroom_bytes=100)
        >>> d.cause(150, 25, warm=100), d.cause(250, 25, warm=100), d.cause(10**12, 25, warm=None)
        (None, 'memory', None)
        """
        bound = self.bound(warm)
        if bound and resident is not None and resident > bound and requests >= self.min_requests:
            return MEMORY
        if self.max_requests and requests >= self.max_requests:
            return REQUESTS
        return None

    def too_low(self, resident: Optional[int], requests: int) -> bool:
        """Fixed bound: is a process over it before `min_requests` (the bound is below its working set)?
        >>> RecyclePolicy(max_memory_bytes=100).too_low(150, 3), RecyclePolicy(max_memory_bytes=100).too_low(50, 3)
        (True, False)
        """
        return not self.derived and bool(self.max_memory_bytes) and resident is not None \
            and resident > self.max_memory_bytes and requests < self.min_requests

    def early(self, cause: str, requests: int) -> bool:
        """Did a replacement come sooner than the bound's own rule says it should? Derived: a process
        replaced for memory before `horizon` requests (or over the ceiling when it had just warmed up).
        >>> d = RecyclePolicy(max_memory_bytes=0, headroom_bytes=100)
        >>> d.early("memory", 120), d.early("memory", 600), d.early("requests", 30)
        (True, False, False)
        >>> RecyclePolicy(max_memory_bytes=100).early("memory", 20)
        False
        """
        return self.derived and cause == MEMORY and requests < self.horizon

    def describe(self, cause: str, warm: Optional[int] = None) -> str:
        """
        >>> RecyclePolicy(max_memory_bytes=512 * MIB).describe("memory")
        'its memory passed the bound of 512 MiB'
        >>> RecyclePolicy(max_memory_bytes=0, headroom_bytes=256 * MIB).describe("memory", 180 * MIB)
        'its memory passed its bound of 436 MiB (180 MiB once warm + 256 MiB headroom)'
        >>> RecyclePolicy(max_memory_bytes=400 * MIB, headroom_bytes=256 * MIB).describe("memory", 180 * MIB)
        'its memory passed its bound of 400 MiB (the ceiling engine_max_memory_mb; 180 MiB once warm + 256 MiB headroom)'
        """
        if cause == MEMORY:
            bound = self.bound(warm)
            if not self.derived or warm is None:
                return f"its memory passed the bound of {bound // MIB} MiB"
            parts = f"{warm // MIB} MiB once warm + {self.headroom_bytes // MIB} MiB headroom"
            if bound < warm + self.headroom_bytes:
                return f"its memory passed its bound of {bound // MIB} MiB (the ceiling engine_max_memory_mb; {parts})"
            return f"its memory passed its bound of {bound // MIB} MiB ({parts})"
        if cause == REQUESTS:
            return f"it served {self.max_requests} requests"
        return "it ended"


def recycle_policy(options: Runtime, door: str) -> RecyclePolicy:
    """A door's process's policy, from its options (the bounds' defaults differ by door).
    >>> recycle_policy(Runtime(engine_max_memory_mb=512, engine_max_requests=0), "fivetran").max_memory_bytes // 2**20
    512
    >>> p = recycle_policy(Runtime(), "conduit")
    >>> p.derived, p.headroom_bytes // 2**20, p.max_memory_bytes // 2**20
    (True, 256, 1024)
    >>> recycle_policy(Runtime(), "fivetran").derived
    False
    """
    return RecyclePolicy(max_memory_bytes=int(options.engine_memory_bound_mb(door) * MIB),
                         max_requests=int(options.engine_max_requests),
                         headroom_bytes=int(options.engine_memory_headroom(door) * MIB))


@dataclass(eq=False)
class Generation:
    """One engine process and what it has served."""

    process: SailProcess
    number: int
    leases: int = 0            # requests using it now
    requests: int = 0          # leases that ended
    retiring: bool = False     # replaced: takes no new lease, stops after its last one
    stopped: bool = field(default=False)
    warned: bool = False       # its bound was said to be too low
    warm_bytes: Optional[int] = None   # its resident memory once warm (when it had served min_requests)

    @property
    def url(self) -> str:
        return self.process.url


class SupervisedEngine:
    """The Sail processes of one storage configuration (see the module docstring)."""

    def __init__(self, start: Callable[[], SailProcess], policy: RecyclePolicy,
                 forget: Callable[[str], None], label: str = "the Sail engine"):
        """`start` starts a process; `forget(url)` drops the sessions of a process that ended or
        is about to (EnginePool); `label` names it in log lines."""
        self._start = start
        self.policy = policy
        self._forget = forget
        self._label = label
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()    # one start at a time (the first, or after a crash)
        self._current: Optional[Generation] = None
        self._retiring: list[Generation] = []
        self._generations = 0
        self._replacing = False
        self._replace_after = 0.0
        self._stopped = False

    # ---- leases -----------------------------------------------------------------------------
    def acquire(self) -> Generation:
        """The current generation, leased (release it with `release`); started when there is none
        or it died."""
        gen = self._lease_current()
        if gen is not None:
            return gen
        with self._start_lock:
            gen = self._lease_current()   # another thread may have started it meanwhile
            if gen is not None:
                return gen
            process = self._start()
            with self._lock:
                if self._stopped:
                    process.stop()
                    raise EngineUnavailable("the destination is stopping")
                gen = self._install(process)
                gen.leases += 1
            log.info(f"{self._label} process started in {process.start_seconds:.1f}s (pid {process.pid}, "
                     f"generation {gen.number})")
            return gen

    def _lease_current(self) -> Optional[Generation]:
        with self._lock:
            if self._stopped:
                raise EngineUnavailable("the destination is stopping")
            gen = self._current
            if gen is not None and not gen.process.alive():
                self._lost(gen)
                gen = None
            if gen is not None:
                gen.leases += 1
            return gen

    def release(self, gen: Generation) -> None:
        """A lease ended: stop a replaced generation whose last lease this was; start a
        replacement when the current one is due (in the background: nobody waits for it)."""
        with self._lock:
            gen.leases -= 1
            gen.requests += 1
            stop = gen.retiring and gen.leases == 0 and not gen.stopped
            if stop:
                gen.stopped = True
                self._retiring.remove(gen)
            cause = resident = None
            warn = warmed = False
            if gen is self._current:
                resident = gen.process.resident_bytes()
                if gen.warm_bytes is None and resident is not None and gen.requests >= self.policy.min_requests:
                    gen.warm_bytes = resident
                    warmed = self.policy.derived
                if not self._replacing and time.monotonic() >= self._replace_after:
                    cause = self.policy.cause(resident, gen.requests, gen.warm_bytes)
                    self._replacing = cause is not None
                    warn = not gen.warned and self.policy.too_low(resident, gen.requests)
                    gen.warned = gen.warned or warn
        if warmed:
            bound = self.policy.bound(gen.warm_bytes)
            log.info(f"{self._label} process pid {gen.process.pid} is warm after {gen.requests} requests at "
                     f"{gen.warm_bytes // MIB} MiB: its memory bound is {bound // MIB} MiB")
            metrics.engine_memory_bound(bound)
        if warn:
            log.warning(f"{self._label} process passed its memory bound ({self.policy.max_memory_bytes // MIB} MiB) "
                        f"after only {gen.requests} requests, at {resident // MIB} MiB: its working set for these "
                        f"tables is about that size, so it is replaced at most every {self.policy.min_requests} "
                        f"requests; set engine_max_memory_mb above it (or engine_memory_headroom_mb, a bound "
                        f"derived from the engine's own size)")
        if stop:
            self._stop_in_background(gen)
        if cause is not None:
            threading.Thread(target=self._replace, args=(gen, cause), name="engine-replace", daemon=True).start()

    # ---- generations ------------------------------------------------------------------------
    def _install(self, process: SailProcess) -> Generation:
        """Under the lock: `process` becomes the current generation."""
        self._generations += 1
        gen = Generation(process, self._generations)
        self._current = gen
        metrics.engine_memory_bound(self.policy.bound(None))   # a derived one once it is warm
        return gen

    def _lost(self, gen: Generation) -> None:
        """Under the lock: the current process died. Its sessions are forgotten; the next lease
        starts a new one."""
        log.warning(f"{self._label} process (pid {gen.process.pid}, generation {gen.number}) "
                    f"{gen.process.how_it_ended} after {gen.requests} requests: the requests it was serving fail, "
                    f"the next one starts a new process")
        metrics.engine_restarted(CRASH)
        metrics.engine_process_ended(CRASH, gen.requests)
        self._current = None
        gen.retiring = gen.stopped = True
        self._forget(gen.url)

    def _replace(self, old: Generation, cause: str) -> None:
        resident = old.process.resident_bytes()
        try:
            process = self._start()
        except Exception as exc:  # noqa: BLE001 - the old generation keeps serving
            reason = exc.message if isinstance(exc, EngineUnavailable) else type(exc).__name__
            log.warning(f"{self._label} process could not be replaced ({reason}); it keeps serving, next try in "
                        f"{REPLACE_RETRY_SECONDS:.0f}s")
            with self._lock:
                self._replacing = False
                self._replace_after = time.monotonic() + REPLACE_RETRY_SECONDS
            return
        with self._lock:
            self._replacing = False
            superseded = self._stopped or self._current is not old   # stopping, or restarted after a crash
            if not superseded:
                gen = self._install(process)
                old.retiring = True
                stop_old = old.leases == 0
                if stop_old:
                    old.stopped = True
                else:
                    self._retiring.append(old)
        if superseded:
            process.stop()
            return
        shown = f"{resident / MIB:.0f} MiB resident, " if resident is not None else ""
        line = (f"{self._label} process pid {old.process.pid} ({shown}{old.requests} requests) replaced by pid "
                f"{process.pid} (generation {gen.number}, started in {process.start_seconds:.1f}s): "
                f"{self.policy.describe(cause, old.warm_bytes)}")
        # Expected, and counted: a line at INFO. Sooner than the bound's rule allows: a warning.
        early = self.policy.early(cause, old.requests)
        if early:
            grew = f" by {(resident - old.warm_bytes) / MIB:.0f} MiB" if resident is not None and old.warm_bytes else ""
            log.warning(f"{line}; it grew{grew} in {old.requests - self.policy.min_requests} requests after warming "
                        f"up, faster than the headroom allows ({self.policy.headroom_bytes // MIB} MiB per "
                        f"{self.policy.horizon} requests): an engine that keeps more per request than Sail does, or "
                        f"tables whose working set grows; if it repeats, raise engine_memory_headroom_mb")
        else:
            log.info(line)
        metrics.engine_restarted(cause)
        metrics.engine_process_ended(cause, old.requests, early=early)
        if stop_old:
            self._stop_in_background(old)

    def _stop_in_background(self, gen: Generation) -> None:
        threading.Thread(target=self._stop_generation, args=(gen,), name="engine-retire", daemon=True).start()

    def _stop_generation(self, gen: Generation) -> None:
        self._forget(gen.url)
        try:
            gen.process.stop()
        except Exception as exc:  # noqa: BLE001 - it goes anyway (SIGKILL after the timeout)
            log.warning(f"stopping {self._label} process pid {gen.process.pid} failed ({type(exc).__name__})")

    # ---- state --------------------------------------------------------------------------------
    def alive(self) -> bool:
        """Is the current process running (False before the first start and after a crash)?"""
        with self._lock:
            return self._current is not None and self._current.process.alive()

    def current_url(self) -> str:
        """The endpoint new leases get now ("" when no process runs)."""
        with self._lock:
            return self._current.url if self._current is not None else ""

    def current_pid(self) -> Optional[int]:
        with self._lock:
            return self._current.process.pid if self._current is not None else None

    def pids(self) -> list[int]:
        """Every process of this engine that runs now (the current one and replaced ones still
        finishing their requests)."""
        with self._lock:
            gens = ([self._current] if self._current is not None else []) + list(self._retiring)
            return [g.process.pid for g in gens if g.process.alive()]

    def resident_bytes(self) -> int:
        """Resident memory of its running processes."""
        with self._lock:
            gens = ([self._current] if self._current is not None else []) + list(self._retiring)
        return sum(g.process.resident_bytes() or 0 for g in gens)

    def stop(self) -> None:
        """Stop every process (the destination stops; requests were drained by the door)."""
        with self._lock:
            self._stopped = True
            gens = ([self._current] if self._current is not None else []) + list(self._retiring)
            self._current = None
            self._retiring.clear()
        for gen in gens:
            gen.stopped = True
            self._stop_generation(gen)
