"""Named crash points for the recovery tests and demos, switched on by environment variables.

AGENT_CRASH_AFTER_STEP=N    SIGKILL right after step N is journalled by this process (not on replay)
AGENT_CRASH_BEFORE_STEP=N   SIGKILL before step N runs, every time (a crash loop)
AGENT_CRASH_INSIDE=NAME     SIGKILL inside tool NAME while it executes (after its effect, before
                            its outcome is journalled)
AGENT_STOP_BEFORE_STEP=N    SIGSTOP before step N runs (a frozen "zombie" worker; SIGCONT wakes it)
AGENT_CRASH_SCOPE=group     the SIGKILLs hit the whole process group (a Celery worker with its pool:
                            a lost pod) instead of this process alone
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


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


def before_step(index: int) -> None:
    if _int("AGENT_CRASH_BEFORE_STEP") == index:
        _die(f"before step {index}")
    if _int("AGENT_STOP_BEFORE_STEP") == index:
        sys.stderr.write(f"crash hook: before step {index}: SIGSTOP\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSTOP)


def after_step(index: int, *, replayed: bool) -> None:
    if not replayed and _int("AGENT_CRASH_AFTER_STEP") == index:
        _die(f"after step {index}")


def inside(tool_name: str) -> None:
    if os.environ.get("AGENT_CRASH_INSIDE", "").strip() == tool_name:
        _die(f"inside {tool_name}")


def armed() -> dict[str, Any]:
    """The crash points switched on, for the run summary."""
    names = (
        "AGENT_CRASH_AFTER_STEP",
        "AGENT_CRASH_BEFORE_STEP",
        "AGENT_CRASH_INSIDE",
        "AGENT_STOP_BEFORE_STEP",
        "AGENT_CRASH_SCOPE",
    )
    return {name: os.environ[name] for name in names if os.environ.get(name)}
