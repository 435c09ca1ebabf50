"""The audit log of human actions: who did what to which object, when, and why.

Every human action in the dashboard (resolutions, policy edits, token changes, limit raises,
exports, retention) writes one AuditEntry through `audit_record`, inside the same transaction
as the action itself, so an action without its entry (or the reverse) cannot be committed.
Entries are append-only at the database level (a trigger refuses UPDATE and DELETE).
"""

from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db import models, transaction
from django.utils import timezone


class AuditEntry(models.Model):
    """One human action. `actor_name` is kept as text so the entry outlives the user row."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,
    )
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=60)
    target = models.CharField(max_length=300, blank=True, default="")
    note = models.TextField(blank=True, default="")
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        app_label = "review"
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["action", "-at"], name="audit_action_at_idx"),
            models.Index(fields=["actor_name", "-at"], name="audit_actor_at_idx"),
            models.Index(fields=["target"], name="audit_target_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=~models.Q(action=""), name="audit_action_not_empty"),
            models.CheckConstraint(
                condition=~models.Q(actor_name=""), name="audit_actor_not_empty"
            ),
        ]
        # the dashboard's permissions; the groups migration hands them out
        permissions = [
            ("browse", "Browse runs, transcripts and the review queue"),
            ("resolve", "Resolve review items and claim them"),
            ("raise_limits", "Raise one run's limits"),
            ("manage_policies", "Create and edit budget policies"),
            ("manage_tokens", "Create and revoke worker tokens"),
            ("export", "Export journals"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.target}"


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
