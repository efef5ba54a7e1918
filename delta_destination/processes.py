"""Facts about other processes on this host, from the kernel (standard library only, the package's
lowest layer: the warehouse and the engines use it, it uses nothing of the package)."""
from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Does process `pid` exist? Signal 0 reaches it (a process of another user, which refuses
    the signal, exists too; so does a zombie, whose parent has not reaped it yet)."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
