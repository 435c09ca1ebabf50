"""A step hook that writes every call it gets to the file named by AGENT_HOOKS_RECORD, one
`index name phase` line each: what tests/support_agent/test_hooks.py reads back."""

from __future__ import annotations

import os


def on_step(index: int, name: str, phase: str) -> None:
    with open(os.environ["AGENT_HOOKS_RECORD"], "a", encoding="utf-8") as record:
        record.write(f"{index} {name} {phase}\n")
