"""The demo's story: support-agent runs that complete, one evicted at step 12 that recovers from
the journal, one killed inside an email.send the ledger cannot see into, one stopped by its token
budget; then a summary read from the database.

Imported by scripts/demo.py after Django is set up. It only reports what really happened: a part
of the product that is not there yet is named as missing, never simulated.
"""

from __future__ import annotations

import importlib.util
from typing import Any

NEEDED = {
    "agents.support": "the support agent and its CLI (issue 4)",
    "agents.tasks": "the Celery task that runs agents (issue 4)",
    "tools.services": "the tool side: tickets, outbound email, idempotency keys (issue 3)",
}


def missing_parts() -> list[str]:
    missing = []
    for module, what in NEEDED.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(f"{module}: {what}")
    return missing


def run_story(*, sup: Any, env: dict[str, str], url: str, started: float) -> None:
    missing = missing_parts()
    if missing:
        print("The story cannot run yet; these parts are not there:", flush=True)
        for line in missing:
            print(f"    {line}", flush=True)
        return
