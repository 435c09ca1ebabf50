"""An agent's step hooks: a seam for code outside the agent (tests, the bench, the demo story)
to watch its steps or interrupt them, without the agent knowing what they do. The support agent
calls them (support_agent/support.py); any agent may.

`AGENT_HOOKS` names modules, comma-separated (for example
`AGENT_HOOKS=support_agent.crash_points`); each is imported once, when the agent is, and may define:

    on_step(index: int, name: str, phase: str) -> None
        phase "before":   step `index` is about to run (executed or replayed)
        phase "inside":   a write step's effect has happened, its outcome is not journalled yet
        phase "after":    this process executed step `index` and journalled it
        phase "replayed": step `index` was replayed from the journal
    report() -> dict[str, Any]
        fields added to the run's JSON summary (the last line the CLI prints)

Without `AGENT_HOOKS` nothing is imported and every call here is a no-op. A hook that raises
stops the run like any exception in the agent's code.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

PHASES = ("before", "inside", "after", "replayed")


def load(spec: str | None) -> tuple[ModuleType, ...]:
    """The hook modules named by `spec` (comma-separated module paths), imported."""
    names = [name.strip() for name in (spec or "").split(",") if name.strip()]
    return tuple(importlib.import_module(name) for name in names)


INSTALLED = load(os.environ.get("AGENT_HOOKS"))


def active() -> bool:
    return bool(INSTALLED)


def on_step(index: int, name: str, phase: str) -> None:
    for module in INSTALLED:
        callback = getattr(module, "on_step", None)
        if callback is not None:
            callback(index, name, phase)


def report() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for module in INSTALLED:
        callback = getattr(module, "report", None)
        if callback is not None:
            fields.update(callback())
    return fields
