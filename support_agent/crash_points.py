"""Crash points and recovery timing for the support agent, installed through its step hooks
(`AGENT_HOOKS=support_agent.crash_points`, see celery_agents/hooks.py). One home for the demo story (its
evicted and "maybe sent" pods) and the tests; the agent itself knows nothing of them, and
nothing here fires unless its variable is set in the process's environment.

Crash points, read from the environment when a step reaches them:

    AGENT_CRASH_AFTER_STEP=N    SIGKILL right after step N is journalled by this process (not on replay)
    AGENT_CRASH_BEFORE_STEP=N   SIGKILL before step N runs, every time (a crash loop)
    AGENT_CRASH_INSIDE=NAME     SIGKILL inside tool NAME while it executes (after its effect, before
                                its outcome is journalled)
    AGENT_STOP_BEFORE_STEP=N    SIGSTOP before step N runs (a frozen "zombie" worker; SIGCONT wakes it)
    AGENT_CRASH_SCOPE=group     the SIGKILLs hit the whole process group (a Celery worker with its pool:
                                a lost pod) instead of this process alone

Timing, added to the run's JSON summary (`report`):

    imported_at          wall clock when the agent's imports were done (this module is imported
                         with the agent)
    attach_seconds       from then to the start of step 0: arguments, the client, attaching to
                         the run (lease and journal)
    first_executed_step  the first step this process executed rather than replayed, and
    first_executed_at    the wall clock when it started
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

IMPORTED_AT = time.time()

_started: dict[int, float] = {}  # step index -> when its "before" hook ran, for this run
_first_executed: tuple[int, float] | None = None


def _int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value else None


def _die(why: str) -> None:
    group = os.environ.get("AGENT_CRASH_SCOPE", "").strip() == "group"
    sys.stderr.write(f"crash hook: {why}: SIGKILL{' to the process group' if group else ''}\n")
    sys.stderr.flush()
    if group:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def on_step(index: int, name: str, phase: str) -> None:
    global _first_executed
    if phase == "before":
        if index == 0:  # every run, resumed or not, starts at step 0: a new run's figures
            _started.clear()
            _first_executed = None
        _started[index] = time.time()
        if _int("AGENT_CRASH_BEFORE_STEP") == index:
            _die(f"before step {index}")
        if _int("AGENT_STOP_BEFORE_STEP") == index:
            sys.stderr.write(f"crash hook: before step {index}: SIGSTOP\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGSTOP)
    elif phase == "inside":
        if os.environ.get("AGENT_CRASH_INSIDE", "").strip() == name:
            _die(f"inside {name}")
    elif phase == "after":
        if _first_executed is None and index in _started:
            _first_executed = (index, _started[index])
        if _int("AGENT_CRASH_AFTER_STEP") == index:
            _die(f"after step {index}")


def report() -> dict[str, Any]:
    first = _first_executed
    return {
        "imported_at": IMPORTED_AT,
        "attach_seconds": _started[0] - IMPORTED_AT if 0 in _started else None,
        "first_executed_step": first[0] if first else None,
        "first_executed_at": first[1] if first else None,
    }
