"""The audit log of human actions: who did what to which object, when, and why.

Every human action in the dashboard (resolutions, policy edits, token changes, limit raises,
exports, retention) writes one AuditEntry through `audit_record`, inside the same transaction
as the action itself, so an action without its entry (or the reverse) cannot be committed.
Entries are append-only at the database level (a trigger refuses UPDATE and DELETE). The model is `review.models.AuditEntry`.
"""

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db import transaction

from review.models import AuditEntry


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
) -> AuditEntry:
    """Write one audit entry. Call it inside the action's transaction (it joins it).

    actor: the user (or a name such as "system:retention" for scheduled work); action: a short
    dotted verb ("step.resolve", "policy.update", "token.revoke"); target: what it acted on
    ("run:<uuid>", "step:<uuid>#3", "policy:7", "token:4").
    """
    if not action:
        raise ValueError("audit_record needs an action")
    user: Any = actor if isinstance(actor, AbstractBaseUser) else None
    with transaction.atomic():
        return AuditEntry.objects.create(
            actor=user,
            actor_name=_actor_name(actor),
            action=action,
            target=target,
            note=(note or "").strip(),
            details=details or {},
        )


__all__ = ["AuditEntry", "audit_record"]
