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
# under the old epoch) is asked again a few times, then answered as it stands
ASK_ROUNDS = 4


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
    """`statement(answers)`, asked again with the tool side's answers while it asks for them."""
    answers: dict[str, Any] = {}
    for _ in range(ASK_ROUNDS):
        try:
            return statement(answers)
        except kernel.AskToolSide as ask:
            answers.update(recovery_asked(ask.steps))
    return statement(answers)
