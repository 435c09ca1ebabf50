"""Worker names: who holds a run's lease, and whether a restart may take it back at once."""

from __future__ import annotations

import os
import socket


def default_worker_name() -> str:
    """INTENTLEDGER_WORKER wins (set it to the pod or Celery node name); else `host:pid`.

    A name of this process alone: two live processes never share it, so a second one started on
    a run another still holds gets LeaseHeld. A restart after a crash is a new pid, but the lease
    call takes the run back from a dead predecessor of the same host at once (`dead_holder_here`),
    so "start it again and it resumes" needs no wait for the old lease to lapse.
    """
    return os.environ.get("INTENTLEDGER_WORKER") or this_process()


def this_process() -> str:
    """`host:pid`: the default name, unique to a live process on a host."""
    return f"{socket.gethostname()}:{os.getpid()}"


def dead_holder_here(holder: object) -> str | None:
    """`holder` when it is a default worker name (`host:pid`) of this host whose process is gone.

    Taking the lease under that name is what a restart under a stable name does: the ledger
    recovers the run with a new epoch. A pid that still exists (even another user's, or reused)
    counts as alive, so the worst a wrong guess costs is the wait for the lease to lapse. POSIX
    only: elsewhere `os.kill` would not just probe.
    """
    if os.name != "posix" or not isinstance(holder, str):
        return None
    host, _, pid = holder.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit() or int(pid) in (0, os.getpid()):
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return holder
    except OSError:
        return None  # it exists (PermissionError: another user's process)
    return None
