"""Budgets: a run's policy, and its limits and use as the API shows them.

Locks: everything here reads and locks nothing. The budget rule itself is the kernel's alone
(`ledger_exceeded_limit`, `ledger_run_budget_stop`); the services ask it about a locked, saved
run through `kernel.exceeded_limit` and `kernel.run_budget_stop`.
"""

from typing import Any

from runs.api_errors import ApplicationError
from runs.constants import BUDGET_LIMITS
from runs.kernel import money
from runs.models import BudgetPolicy, Run


def budget_policy_for(agent: str, *, team_id: int) -> BudgetPolicy:
    """The agent's own policy in the team, else the team's default one (seeded by its
    migration or the team's creation, runs/default_policy.py); neither is a refusal, never
    limits from elsewhere."""
    policies = {
        (p.agent, p.is_default): p
        for p in BudgetPolicy.objects.filter(team_id=team_id, agent=agent)
        | BudgetPolicy.objects.filter(team_id=team_id, is_default=True)
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


def limits_copied(source: BudgetPolicy | Run, prefix: str) -> dict[str, Any]:
    """A new run's limit_* fields, copied from its policy's max_* or from another run's limit_*
    (a fork): a run keeps the limits it was created with."""
    return {f"limit_{name}": getattr(source, f"{prefix}{name}") for name in BUDGET_LIMITS}
