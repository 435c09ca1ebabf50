"""Budgets: a run's policy, its limits and use, and the budget rule (`_exceeded_limit`).

Locks: `budget_policy_for`, `budget_of` and `limits_copied` read and lock nothing. The caller of
`_exceeded_limit` and `_budget_exceed` holds the run's row lock (`_budget_exceed` moves the run
and saves it). `_exceeded_limit` is the Python twin of the kernel's `ledger_exceeded_limit`
(tests/runs/test_budget_rule_agrees.py holds them equal).
"""

from datetime import datetime
from typing import Any

from runs.api_errors import ApplicationError
from runs.constants import BUDGET_LIMITS, EventType, RunStatus
from runs.kernel import event_append, money, run_move
from runs.models import BudgetPolicy, Run


def budget_policy_for(agent: str) -> BudgetPolicy:
    """The agent's own policy, else the default one (seeded by its migration,
    runs/default_policy.py); neither is a refusal, never limits from elsewhere."""
    policies = {
        (p.agent, p.is_default): p
        for p in BudgetPolicy.objects.filter(agent=agent)
        | BudgetPolicy.objects.filter(is_default=True)
    }
    policy = policies.get((agent, False)) or policies.get((None, True))
    if policy is None:
        raise ApplicationError(
            "no_budget_policy",
            f"Agent {agent!r} has no budget policy and there is no default policy; "
            "an admin must create one before runs can start.",
            details={"agent": agent},
        )
    return policy


def budget_of(run: Run) -> dict[str, Any]:
    """A run's limits (`limit_<name>`) and use (`used_<name>`, no use of wall time) by limit name."""

    def shown(name: str, value: Any) -> Any:
        return money(value) if name == "cost_usd" and value is not None else value

    return {
        "limits": {name: shown(name, getattr(run, f"limit_{name}")) for name in BUDGET_LIMITS},
        "used": {
            name: shown(name, getattr(run, f"used_{name}"))
            for name in BUDGET_LIMITS
            if name != "wall_seconds"
        },
        "deadline": run.deadline.isoformat(),
    }


def _exceeded_limit(run: Run, *, now: datetime, next_step: bool) -> dict[str, Any] | None:
    """The first limit the run has reached, or None. `next_step`: would one more intent fit?"""
    if now >= run.deadline:
        return {
            "limit": "wall_seconds",
            "limit_value": run.limit_wall_seconds,
            "deadline": run.deadline.isoformat(),
        }
    if next_step and run.used_steps >= run.limit_steps:
        return {"limit": "steps", "limit_value": run.limit_steps, "used": run.used_steps}
    if run.used_tokens > run.limit_tokens or (next_step and run.used_tokens >= run.limit_tokens):
        return {"limit": "tokens", "limit_value": run.limit_tokens, "used": run.used_tokens}
    if run.limit_cost_usd is not None and (
        run.used_cost_usd > run.limit_cost_usd
        or (next_step and run.used_cost_usd >= run.limit_cost_usd)
    ):
        return {
            "limit": "cost_usd",
            "limit_value": money(run.limit_cost_usd),
            "used": money(run.used_cost_usd),
        }
    return None


def _budget_exceed(run: Run, limit: dict[str, Any], *, actor: str, now: datetime) -> None:
    run_move(run, RunStatus.BUDGET_EXCEEDED, reason=limit["limit"])
    event_append(run, type=EventType.BUDGET_EXCEEDED, payload=limit, actor=actor, at=now)
    run.save()


def limits_copied(source: BudgetPolicy | Run, prefix: str) -> dict[str, Any]:
    """A new run's limit_* fields, copied from its policy's max_* or from another run's limit_*
    (a fork): a run keeps the limits it was created with."""
    return {f"limit_{name}": getattr(source, f"{prefix}{name}") for name in BUDGET_LIMITS}
