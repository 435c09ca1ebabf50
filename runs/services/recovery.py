"""What the recovery rules must learn from the tool side, asked before the kernel's statement.

The rules themselves are the kernel's (`ledger_recover_open_intents` in runs/sql/ledger.sql,
applied by a lease after a lost holder and by the reaper). A rule that depends on the tool side
(a `ledger`-enforced write's key state; a tool's own lookup, tools.lookups, up to 2 s) cannot
be decided under the run's row lock without holding that lock for as long as the tool takes.
So the statement names the steps it needs answers for and changes nothing (kernel.AskToolSide);
`recovery_asked` asks, holding no lock, and the caller sends the statement again with the
answers. An answer that changed meanwhile is no worse than one read a moment earlier under the
lock: a key that completes afterwards is recorded by the gateway under the old epoch (refused,
fenced) and reconciled from the key at the step's next invoke or recovery.

A lost holder that is not lost after all keeps journalling new writes under its expired lease,
so each statement finds a step it has not been told about yet. After ASK_ROUNDS rounds the
asking stops with `HolderStillJournalling`, and nothing has changed: the lease answers 409
`lease_held` (the holder is evidently still at work; docs/api.md), the reaper leaves the run for
its next sweep.

Locks: none. The callers (runs.services.leases, runs.services.enforcement) call this between
two kernel statements, outside any transaction of their own.
"""

from collections.abc import Callable
from typing import Any

from django.conf import settings

from runs import kernel
from runs.canonical import arguments_hash
from runs.constants import EnforcedBy
from runs.recovery import key_state_lookup
from tools.lookups import tool_lookup

# a statement that keeps finding new steps to ask about (its lost holder still journalling
# under the old epoch) is asked again this many times, then given up (HolderStillJournalling)
ASK_ROUNDS = 4


class HolderStillJournalling(Exception):
    """The statement still asked about new steps after ASK_ROUNDS rounds of answers: the run's
    holder keeps journalling writes under its expired lease. Nothing was changed. `steps`: what
    the last statement asked about."""

    def __init__(self, steps: list[dict[str, Any]]) -> None:
        super().__init__(f"still asking after {ASK_ROUNDS} rounds, about steps {steps}")
        self.steps = steps


def lookup_tools() -> list[str]:
    """The tools that declare a lookup (LEDGER_TOOL_LOOKUPS): only their steps are asked about."""
    return sorted(getattr(settings, "LEDGER_TOOL_LOOKUPS", {}) or {})


def recovery_asked(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The tool side's answers about `steps` (kernel.AskToolSide.steps), keyed by step index as
    the kernel reads them (runs/sql/ledger.sql, "Recovery")."""
    answers: dict[str, Any] = {}
    key_state = None
    for step in steps:
        key = step["idempotency_key"]
        if step["enforced_by"] == EnforcedBy.LEDGER:
            key_state = key_state or key_state_lookup()
            state = key_state(key)
            answers[str(step["index"])] = {
                "key_state": {
                    "state": state.state,
                    "stale": state.stale,
                    "response": state.response,
                    "result_hash": arguments_hash(state.response),
                }
            }
        else:
            said = tool_lookup(step["name"], key)
            answers[str(step["index"])] = {"lookup": None if said is None else said.evidence()}
    return answers


def with_tool_side_answers[T](statement: Callable[[dict[str, Any]], T]) -> T:
    """`statement(answers)`, sent again with the tool side's answers while it asks for them, at
    most ASK_ROUNDS times; then HolderStillJournalling."""
    answers: dict[str, Any] = {}
    for _ in range(ASK_ROUNDS):
        try:
            return statement(answers)
        except kernel.AskToolSide as ask:
            answers.update(recovery_asked(ask.steps))
    try:
        return statement(answers)
    except kernel.AskToolSide as ask:
        raise HolderStillJournalling(ask.steps) from None
