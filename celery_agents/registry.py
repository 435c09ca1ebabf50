"""The agents Celery may run, by name: the journal's `agent` field picks the entry.

An agent's own Django app registers it at start-up (`agent_register` in its AppConfig.ready).
Each entry resumes a run by id: `fn(ledger, *, run_id, worker, ...)`. Kept as dotted paths so
importing the registry (the web process does, to re-dispatch runs) loads no agent code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

AGENTS: dict[str, str] = {}


def agent_register(*, agent: str, runner: str) -> None:
    """Register the dotted path `runner` as the way to run `agent`. Registering a name again with
    the same path is a no-op; with another path it is refused (two apps claim one agent)."""
    known = AGENTS.setdefault(agent, runner)
    if known != runner:
        raise ValueError(f"agent {agent!r} is registered already, to {known}")


def is_registered(agent: str) -> bool:
    return agent in AGENTS


def agent_runner(agent: str) -> Callable[..., Any]:
    try:
        path = AGENTS[agent]
    except KeyError:
        raise LookupError(f"no agent {agent!r} is registered (known: {sorted(AGENTS)})") from None
    module, _, name = path.rpartition(".")
    runner: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return runner
