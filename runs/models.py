"""The journal: runs, their steps, their hash-chained events, and the budgets they carry."""

import uuid
from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from runs.constants import (
    Effect,
    EnforcedBy,
    Resolution,
    RunRunner,
    RunStatus,
    StepKind,
    StepState,
)

LIVE = [RunStatus.PENDING, RunStatus.RUNNING, RunStatus.INTERRUPTED, RunStatus.NEEDS_REVIEW]


class BudgetPolicy(models.Model):
    """Limits a run copies when it is created; later edits never reach running runs."""

    name = models.CharField(max_length=100, unique=True)
    agent = models.CharField(max_length=100, null=True, blank=True, unique=True)
    is_default = models.BooleanField(default=False)
    max_steps = models.PositiveIntegerField()
    max_tokens = models.PositiveBigIntegerField()
    max_wall_seconds = models.PositiveIntegerField()
    max_cost_usd = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    max_recoveries = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=Q(is_default=True), name="one_default_policy"
            ),
            models.CheckConstraint(
                condition=Q(max_steps__gte=1, max_tokens__gte=1, max_wall_seconds__gte=1),
                name="policy_limits_positive",
            ),
            models.CheckConstraint(
                condition=Q(max_cost_usd__isnull=True) | Q(max_cost_usd__gt=0),
                name="policy_cost_positive",
            ),
            models.CheckConstraint(
                condition=Q(agent__isnull=True) | Q(is_default=False),
                name="default_policy_has_no_agent",
            ),
        ]
        ordering = ["-is_default", "name"]

    def __str__(self) -> str:
        return self.name


class Run(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.CharField(max_length=100)
    external_id = models.CharField(max_length=200, null=True, blank=True)
    input = models.JSONField(default=dict)
    output = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.PENDING)
    status_reason = models.CharField(max_length=200, blank=True, default="")
    runner = models.CharField(
        max_length=10,
        choices=RunRunner.choices,
        default=RunRunner.EXTERNAL,
        db_default=RunRunner.EXTERNAL,
    )
    policy = models.ForeignKey(BudgetPolicy, null=True, blank=True, on_delete=models.SET_NULL)

    limit_steps = models.PositiveIntegerField()
    limit_tokens = models.PositiveBigIntegerField()
    limit_cost_usd = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    limit_wall_seconds = models.PositiveIntegerField()
    limit_recoveries = models.PositiveIntegerField()
    used_steps = models.PositiveIntegerField(default=0)
    used_tokens = models.PositiveBigIntegerField(default=0)
    used_cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal(0))
    used_recoveries = models.PositiveIntegerField(default=0)
    deadline = models.DateTimeField()

    step_count = models.PositiveIntegerField(default=0)
    lease_worker = models.CharField(max_length=200, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_ttl_seconds = models.PositiveIntegerField(default=30)
    leases_granted = models.PositiveIntegerField(default=0)
    epoch = models.PositiveBigIntegerField(default=0)

    # head of the hash chain, so appending an event needs no read of the event table
    event_seq = models.PositiveIntegerField(default=0)
    event_head = models.CharField(max_length=64)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "external_id"],
                condition=Q(external_id__isnull=False),
                name="run_external_id_unique_per_agent",
            ),
            models.CheckConstraint(
                condition=Q(used_cost_usd__gte=0), name="run_used_cost_non_negative"
            ),
            models.CheckConstraint(
                condition=Q(limit_steps__gte=1, limit_tokens__gte=1, limit_wall_seconds__gte=1),
                name="run_limits_positive",
            ),
            models.CheckConstraint(
                condition=Q(limit_cost_usd__isnull=True) | Q(limit_cost_usd__gt=0),
                name="run_limit_cost_positive",
            ),
            models.CheckConstraint(
                condition=Q(used_steps__lte=F("step_count")), name="run_steps_used_match_journal"
            ),
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values), name="run_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(runner__in=RunRunner.values), name="run_runner_valid"
            ),
            models.CheckConstraint(
                condition=Q(lease_worker__isnull=True) | Q(lease_expires_at__isnull=False),
                name="run_lease_has_expiry",
            ),
        ]
        indexes = [
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status=RunStatus.RUNNING),
                name="run_live_lease_idx",
            ),
            models.Index(
                fields=["deadline"], condition=Q(status__in=LIVE), name="run_live_deadline_idx"
            ),
            models.Index(fields=["status", "-created_at"], name="run_status_created_idx"),
            models.Index(fields=["-created_at"], name="run_created_idx"),
            models.Index(fields=["agent", "-created_at"], name="run_agent_created_idx"),
        ]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.agent} {self.id}"


class Step(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()
    kind = models.CharField(max_length=10, choices=StepKind.choices)
    name = models.CharField(max_length=200)
    effect = models.CharField(max_length=10, choices=Effect.choices)
    enforced_by = models.CharField(max_length=10, choices=EnforcedBy.choices, null=True, blank=True)
    arguments = models.JSONField(default=dict)
    arguments_hash = models.CharField(max_length=64)
    idempotency_key = models.CharField(max_length=400)
    state = models.CharField(max_length=20, choices=StepState.choices, default=StepState.INTENT)
    result = models.JSONField(null=True, blank=True)
    usage_input_tokens = models.PositiveBigIntegerField(default=0)
    usage_output_tokens = models.PositiveBigIntegerField(default=0)
    usage_cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal(0))
    epoch = models.PositiveBigIntegerField()
    intent_at = models.DateTimeField()
    outcome_at = models.DateTimeField(null=True, blank=True)
    executions = models.PositiveIntegerField(default=1)

    resolution_action = models.CharField(
        max_length=10, choices=Resolution.choices, null=True, blank=True
    )
    resolution_by = models.CharField(max_length=150, null=True, blank=True)
    resolution_note = models.TextField(null=True, blank=True)
    resolution_at = models.DateTimeField(null=True, blank=True)
    # a supervisor's claim on an unknown step, so two people do not work it at once
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claim_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "index"], name="step_index_unique_per_run"),
            models.CheckConstraint(
                condition=Q(usage_cost_usd__gte=0), name="step_cost_non_negative"
            ),
            models.CheckConstraint(
                condition=Q(effect=Effect.WRITE, enforced_by__isnull=False)
                | Q(effect=Effect.READ, enforced_by__isnull=True),
                name="step_enforced_by_only_on_writes",
            ),
            models.CheckConstraint(
                condition=Q(resolution_action__isnull=True)
                | (
                    Q(resolution_by__isnull=False)
                    & Q(resolution_at__isnull=False)
                    & Q(resolution_note__isnull=False)
                    & ~Q(resolution_note="")
                ),
                name="step_resolution_complete",
            ),
            models.CheckConstraint(
                condition=Q(state__in=StepState.values), name="step_state_valid"
            ),
        ]
        indexes = [
            models.Index(
                fields=["run"], condition=Q(state=StepState.INTENT), name="step_open_intent_idx"
            ),
            models.Index(
                fields=["intent_at"], condition=Q(state=StepState.UNKNOWN), name="step_unknown_idx"
            ),
            models.Index(fields=["idempotency_key"], name="step_key_idx"),
        ]
        ordering = ["run", "index"]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.index} {self.name}"

    @property
    def total_tokens(self) -> int:
        return self.usage_input_tokens + self.usage_output_tokens


class Event(models.Model):
    """Append-only: a migration installs a trigger that refuses UPDATE and DELETE."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    actor = models.CharField(max_length=200)
    at = models.DateTimeField()
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="event_seq_unique_per_run"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="event_seq_positive"),
        ]
        ordering = ["run", "seq"]

    def __str__(self) -> str:
        return f"{self.run_id}@{self.seq} {self.type}"


class TokenScope(models.TextChoices):
    """What a token may do beyond the worker API (space-separated in `WorkerToken.scope`)."""

    WORKER = "worker"
    # free-form gateway keys, for callers that are not agents (no journalled intent needed)
    TOOLS_DIRECT = "tools:direct"


class WorkerToken(models.Model):
    """A named, revocable bearer token for workers; only its sha256 is stored.

    `agents`: the agents whose runs (and their keys) the token may see and write; empty means
    all agents (every token made before scoping existed keeps that access).
    """

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12)
    token_hash = models.CharField(max_length=64, unique=True)
    scope = models.CharField(max_length=100, default=TokenScope.WORKER)
    agents = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        ordering = ["name", "created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @property
    def scopes(self) -> frozenset[str]:
        return frozenset(self.scope.split())
