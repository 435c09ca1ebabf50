"""The audit log of human actions: who did what to which object, when, and why.

Every human action in the dashboard (resolutions, policy edits, token changes, limit raises,
exports, retention) writes one AuditEntry through `audit_record`, inside the same transaction
as the action itself, so an action without its entry (or the reverse) cannot be committed.
Entries are append-only at the database level (a trigger refuses UPDATE and DELETE). The model is `review.models.AuditEntry`.
"""

from contextlib import nullcontext
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ValidationError
from django.db import transaction

from review.models import AuditEntry
from teams.scope import every_team, home_team_id


def _actor_name(actor: AbstractBaseUser | AnonymousUser | str | None) -> str:
    if actor is None:
        return "system"
    if isinstance(actor, str):
        return actor or "system"
    name = actor.get_username()
    return name or "anonymous"


def audit_record(
    *,
    actor: AbstractBaseUser | AnonymousUser | str | None,
    action: str,
    target: str = "",
    note: str = "",
    details: dict[str, Any] | None = None,
    team: Any = None,
) -> AuditEntry:
    """Write one audit entry. Call it inside the action's transaction (it joins it).

    actor: the user (or a name such as "system:retention" for scheduled work); action: a short
    dotted verb ("step.resolve", "policy.update", "token.revoke"); target: what it acted on
    ("run:<uuid>", "step:<uuid>#3", "policy:7", "token:4"). team: the team (or its id) the
    entry is filed in; by default a run's or a step's target's run's team, else the one team
    the transaction names (teams.scope).
    """
    if not action:
        raise ValueError("audit_record needs an action")
    user: Any = actor if isinstance(actor, AbstractBaseUser) else None
    team_id = getattr(team, "pk", team)
    if team_id is None:
        team_id = _team_of_target(target)
    if team_id is None:
        team_id = home_team_id()
    # an entry of no team (a sign-in, a refusal, an account) is org-wide: written whoever the
    # actor is, a stranger to every team included (teams.scope, `audit`)
    with transaction.atomic(), every_team("audit") if team_id is None else nullcontext():
        return AuditEntry.objects.create(
            team_id=team_id,
            actor=user,
            actor_name=_actor_name(actor),
            action=action,
            target=target,
            note=(note or "").strip(),
            details=details or {},
        )


def _team_of_target(target: str) -> int | None:
    """The team of a run's (or a run's step's) target, read from the run; None otherwise."""
    kind, _, rest = target.partition(":")
    if kind not in ("run", "step") or not rest:
        return None
    from runs.models import Run

    run_id = rest.split("#", 1)[0]
    try:
        return Run.objects.filter(pk=run_id).values_list("team_id", flat=True).first()
    except (ValueError, ValidationError):
        return None


__all__ = ["AuditEntry", "audit_record"]
