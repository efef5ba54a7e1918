"""Exec-launcher for child processes that must die with the destination.

Why a separate program: the destination runs gRPC threads, and Python code run between
fork and exec (`subprocess.Popen(preexec_fn=...)`) is unsafe there: it forces a plain
fork(), runs the interpreter's and gRPC's at-fork handlers in the child, and a child of a
multi-threaded process may only call async-signal-safe functions before exec. Twice in
~30 starts the engine died that way (SIGSEGV, SIGABRT with gRPC's `Epoll1Poller` message).

So the serving process starts `python -I -S launcher.py PARENT_PID PROGRAM ARGS...` with no
preexec_fn (CPython then uses vfork + exec, all in C). This fresh, single-threaded
interpreter asks the kernel for SIGKILL when its parent thread ends (PR_SET_PDEATHSIG),
checks that the parent did not end already, and execs PROGRAM. exec keeps the pid and the
death signal (it is cleared only by exec of set-uid/set-gid or file-capability binaries),
so PROGRAM - and what it execs in turn, like spark-submit exec'ing java - is killed with
the destination, also on kill -9.

Run as a file with `-I -S` it imports nothing but the standard library: no site-packages,
no PYTHON* environment variables, no current directory on sys.path. util-linux's
`setpriv --pdeathsig KILL` does the same, but does not close the race with a parent that
dies before the prctl, and is not on every machine.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading

PR_SET_PDEATHSIG = 1
PARENT_GONE = 70  # EX_SOFTWARE-like: nothing was started because its owner had already ended


def command(program: list[str]) -> list[str]:
    """The argv that runs `program` under this launcher, owned by the calling process."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid()), *program]


def spawn_owned(program: list[str], *, name: str, cwd, env: dict, stdout, stderr=subprocess.STDOUT,
                self_owned: bool = False) -> subprocess.Popen:
    """Start `program` under this launcher from a thread of its own that lives exactly as long
    as the child (the death signal follows the thread that forked, not the process), and return
    it once started. Its own process group (setpgid in C): a terminal's Ctrl-C reaches the
    destination, which stops its children in order. `self_owned`: the program asks for its
    death signal itself, as this launcher would (the Sail engine, sail_engine.py), and is
    started directly."""
    started = threading.Event()
    result: list = []
    argv = program if self_owned else command(program)

    def own():
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                                    stderr=stderr, process_group=0)
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            result.append(exc)
            started.set()
            return
        result.append(proc)
        started.set()
        proc.wait()

    threading.Thread(target=own, name=name, daemon=True).start()
    started.wait()
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or not argv[1].isdigit():
        print("usage: launcher.py PARENT_PID PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    parent, program = int(argv[1]), argv[2:]
    die_with_parent()
    # The parent may have died between our fork and the prctl: then no signal would ever
    # come, and the program would outlive it. We were reparented, so the parent pid changed.
    if os.getppid() != parent:
        return PARENT_GONE
    try:
        os.execv(program[0], program)
    except OSError as exc:
        print(f"launcher: cannot run {program[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    return 127  # not reached: execv returns only by raising


if __name__ == "__main__":
    sys.exit(main(sys.argv))
