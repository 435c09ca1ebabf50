"""Dashboard tables: the audit log, login throttling, and sent escalations."""

from django.db import models
from django.db.models import Q

from review.audit import AuditEntry
from runs.models import Step


class LoginFailure(models.Model):
    """Failed logins per (username, ip) inside a window; enough of them lock that pair out."""

    username = models.CharField(max_length=150)
    ip = models.GenericIPAddressField()
    failures = models.PositiveIntegerField(default=0)
    first_failure_at = models.DateTimeField()
    locked_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["username", "ip"], name="login_failure_unique_pair")
        ]

    def __str__(self) -> str:
        return f"{self.username}@{self.ip}: {self.failures}"


class Escalation(models.Model):
    """One SLA escalation mail per waiting item; the unique constraint is the no-repeat rule."""

    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    sent_at = models.DateTimeField()
    recipients = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["step"], condition=Q(step__isnull=False), name="escalation_once_per_step"
            ),
            models.UniqueConstraint(
                fields=["run"],
                condition=Q(step__isnull=True, run__isnull=False),
                name="escalation_once_per_review_run",
            ),
            models.CheckConstraint(
                condition=Q(step__isnull=False) | Q(run__isnull=False),
                name="escalation_has_item",
            ),
        ]

    def __str__(self) -> str:
        return f"escalation step={self.step_id} run={self.run_id} at {self.sent_at}"


__all__ = ["AuditEntry", "Escalation", "LoginFailure"]
