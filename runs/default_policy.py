"""The default budget policy: the limits of a run whose agent has no policy of its own.

Its one source is this seeding function, which the data migration runs (and the test harness
after each flush of the test database). Nothing else supplies default limits: when an admin
deletes the default policy, a run for an agent without its own policy is refused
(`no_budget_policy`) rather than given limits from elsewhere.
"""

from __future__ import annotations

from typing import Any

DEFAULT_POLICY: dict[str, Any] = {
    "name": "default",
    "max_steps": 50,
    "max_tokens": 200_000,
    "max_wall_seconds": 3600,
    "max_cost_usd": None,
    "max_recoveries": 5,
}


def seed_default_policy(budget_policy_model: Any, team_id: int | None = None) -> None:
    """Create the default policy unless one exists (in `team_id`: a team's default; without it,
    the team the transaction names). Takes the model class so the migration can pass its
    historical model."""
    team = {} if team_id is None else {"team_id": team_id}
    if not budget_policy_model.objects.filter(is_default=True, **team).exists():
        budget_policy_model.objects.create(is_default=True, **team, **DEFAULT_POLICY)
