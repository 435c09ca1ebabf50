"""Dashboard tables: the audit log, login throttling, and sent escalations."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from runs.models import Step
from teams.fields import TeamField


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
    # the team the action was in; none: an org-wide action (a sign-in, a person's account), which
    # only the every-team scope (org admins) sees (teams/sql/boundary.sql)
    team = TeamField(null=True)

    class Meta:
        verbose_name_plural = "audit entries"
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
            ("run_actions", "Cancel, fork and bulk-act on runs (the console)"),
            (
                "manage_audit",
                "Sign checkpoints, acknowledge alerts, set retention, see all exports",
            ),
            ("manage_people", "See everyone who can sign in, create local users, deactivate"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.target}"


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

    # no foreign key to runs_step in the database: its keys carry run_id and journal_month
    step = models.ForeignKey(
        Step,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        db_constraint=False,
    )
    # every escalation names its run (a step's too), so the table can be distributed by run_id
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="+")
    sent_at = models.DateTimeField()
    recipients = models.JSONField(default=list)
    team = TeamField(db_constraint=False, db_index=False)  # its run's (teams_team_fill checks)

    class Meta:
        # one per step, and one per run waiting for review without a step (its step null):
        # NULLS NOT DISTINCT makes (run, null) one value
        constraints = [
            models.UniqueConstraint(
                fields=["run", "step"], nulls_distinct=False, name="escalation_once_per_item"
            )
        ]

    def __str__(self) -> str:
        return f"escalation step={self.step_id} run={self.run_id} at {self.sent_at}"


class EscalationWebhook(models.Model):
    """Where escalations are posted besides the supervisors' mail: Slack-compatible JSON,
    signed with HMAC-SHA256 of the body under `secret` (header X-Agent-Ledger-Signature)."""

    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=200)
    active = models.BooleanField(default=True)
    created_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    team = TeamField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(url__startswith="http://") | Q(url__startswith="https://"),
                name="webhook_url_is_http",
            ),
            # the same URL twice would post every escalation twice
            models.UniqueConstraint(fields=["team", "url"], name="webhook_url_unique"),
        ]
        ordering = ["created_at"]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    """One escalation posted to one webhook; Celery retries it with backoff until it lands."""

    webhook = models.ForeignKey(EscalationWebhook, on_delete=models.CASCADE, related_name="+")
    body = models.TextField()  # the exact bytes signed and sent (UTF-8 JSON)
    created_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")
    team = TeamField(db_constraint=False, db_index=False)  # its webhook's (teams_team_fill checks)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        indexes = [
            models.Index(
                fields=["created_at"],
                condition=Q(delivered_at__isnull=True),
                name="webhook_undelivered_idx",
            )
        ]

    def __str__(self) -> str:
        return f"delivery {self.pk} to {self.webhook_id}"


__all__ = ["AuditEntry", "Escalation", "EscalationWebhook", "LoginFailure", "WebhookDelivery"]
