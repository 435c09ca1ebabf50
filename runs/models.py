"""The journal: runs, their steps, their hash-chained events, and the budgets they carry."""

import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models
from django.db.models import F, Q
from django.db.models.fields.json import KT, KeyTextTransform
from django.db.models.functions import Cast, Upper
from django.utils import timezone

from runs.constants import (
    ApprovalOutcome,
    Effect,
    EnforcedBy,
    ResolutionAction,
    RunRunner,
    RunStatus,
    StatusReason,
    StepKind,
    StepState,
)
from teams.fields import TeamField


def journal_month_now() -> date:
    """The first day (UTC) of this month: a new run's `journal_month`."""
    now = timezone.now().astimezone(UTC)
    return date(now.year, now.month, 1)


def budget_limit_checks(prefix: str, *, name: str, cost_name: str) -> list[models.CheckConstraint]:
    """The one rule for a budget's limits, on a policy (`max_*`) and on the run that copies them
    (`limit_*`): steps, tokens and wall seconds at least 1; the cost unset or above 0."""
    positive = ("steps", "tokens", "wall_seconds")
    cost = f"{prefix}_cost_usd"
    return [
        models.CheckConstraint(
            condition=Q(**{f"{prefix}_{limit}__gte": 1 for limit in positive}), name=name
        ),
        models.CheckConstraint(
            condition=Q(**{f"{cost}__isnull": True}) | Q(**{f"{cost}__gt": 0}), name=cost_name
        ),
    ]


LIVE = [RunStatus.PENDING, RunStatus.RUNNING, RunStatus.INTERRUPTED, RunStatus.NEEDS_REVIEW]


class BudgetPolicy(models.Model):
    """Limits a run copies when it is created; later edits never reach running runs."""

    name = models.CharField(max_length=100)
    agent = models.CharField(max_length=100, null=True, blank=True)
    is_default = models.BooleanField(default=False)
    max_steps = models.PositiveIntegerField()
    max_tokens = models.PositiveBigIntegerField()
    max_wall_seconds = models.PositiveIntegerField()
    max_cost_usd = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    max_recoveries = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    team = TeamField()

    class Meta:
        verbose_name_plural = "budget policies"
        constraints = [
            # a team's policies: one default, one policy per agent, names unique in the team
            models.UniqueConstraint(
                fields=["team"], condition=Q(is_default=True), name="one_default_policy"
            ),
            models.UniqueConstraint(
                fields=["team", "name"],
                name="policy_name_unique_per_team",
                violation_error_message="Budget policy with this Name already exists.",
            ),
            models.UniqueConstraint(
                fields=["team", "agent"],
                condition=Q(agent__isnull=False),
                name="policy_agent_unique_per_team",
                violation_error_message="Budget policy with this Agent already exists.",
            ),
            *budget_limit_checks(
                "max", name="policy_limits_positive", cost_name="policy_cost_positive"
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
    # the month the run was created in: its steps and events carry it too and live in that
    # month's partition (runs/migrations/0001_initial.py); never changes
    journal_month = models.DateField(default=journal_month_now, editable=False)
    # retention never purges a run on legal hold (audit.retention), nor drops it with its month;
    # an admin sets and lifts it (runs.services.actions.run_legal_hold), each time with an event
    legal_hold = models.BooleanField(default=False, db_default=False)
    legal_hold_at = models.DateTimeField(null=True, blank=True)
    legal_hold_by = models.CharField(max_length=150, blank=True, default="", db_default="")
    legal_hold_note = models.TextField(blank=True, default="", db_default="")

    # a fork's first `forked_from_index` steps are copies of this run's (runs.services.forks.run_fork)
    forked_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="forks"
    )
    forked_from_index = models.PositiveIntegerField(null=True, blank=True)

    # the caller's W3C trace context at creation (a `traceparent` header on POST /runs/): the
    # run's span is a child of that span, in that trace (traces/); null: a trace of its own
    trace_id = models.CharField(max_length=32, null=True, blank=True, editable=False)
    trace_parent_span_id = models.CharField(max_length=16, null=True, blank=True, editable=False)
    # the team of the token that created it (teams/): every row of the run carries it too
    team = TeamField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(forked_from__isnull=True, forked_from_index__isnull=True)
                | Q(forked_from__isnull=False, forked_from_index__isnull=False),
                name="run_fork_names_its_step",
            ),
            models.UniqueConstraint(
                fields=["team", "agent", "external_id"],
                condition=Q(external_id__isnull=False),
                name="run_external_id_unique_per_agent",
            ),
            models.CheckConstraint(
                condition=Q(used_cost_usd__gte=0), name="run_used_cost_non_negative"
            ),
            *budget_limit_checks(
                "limit", name="run_limits_positive", cost_name="run_limit_cost_positive"
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
            # who put it on hold, when and why, only while it is on hold (the chain keeps the
            # history: run_legal_hold_set / run_legal_hold_lifted events)
            models.CheckConstraint(
                condition=Q(legal_hold=True)
                | Q(legal_hold_at__isnull=True, legal_hold_by="", legal_hold_note=""),
                name="run_legal_hold_details_only_on_hold",
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
            # the review queue's runs in review for another reason than an unknown step (crash
            # loops): counted on every dashboard page (the nav badge), listed oldest first; the
            # id in the index lets the anti-join on unknown steps read it alone (an index on
            # updated_at only was passed over for a bitmap scan of every run in review)
            models.Index(
                fields=["updated_at", "id"],
                condition=Q(status=RunStatus.NEEDS_REVIEW)
                & ~Q(status_reason=StatusReason.UNKNOWN_STEP),
                name="run_review_not_unknown_idx",
            ),
            models.Index(fields=["-created_at"], name="run_created_idx"),
            # the runs list's "on legal hold" filter: the few held runs, newest first
            models.Index(
                fields=["-created_at"], condition=Q(legal_hold=True), name="run_legal_hold_idx"
            ),
            # retention: the runs of one month (audit.retention)
            models.Index(fields=["journal_month"], name="run_journal_month_idx"),
            models.Index(fields=["agent", "-created_at"], name="run_agent_created_idx"),
            # dashboard search (review.selectors.runs_filtered): the short id the list shows
            # is a prefix of the id's text; external ids and customer addresses match in part
            models.Index(
                OpClass(Cast("id", output_field=models.TextField()), name="text_pattern_ops"),
                name="run_id_text_prefix_idx",
            ),
            GinIndex(
                OpClass(Upper("external_id"), name="gin_trgm_ops"),
                name="run_external_id_trgm_idx",
            ),
            GinIndex(
                OpClass(Upper(KeyTextTransform("customer", "input")), name="gin_trgm_ops"),
                name="run_customer_trgm_idx",
            ),
            GinIndex(
                OpClass(Upper(KT("input__ticket__customer")), name="gin_trgm_ops"),
                name="run_ticket_customer_trgm_idx",
            ),
        ]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.agent} {self.id}"


def _run_by_month(*, on_delete: Any, related_name: str) -> models.ForeignKey[Run]:
    """The run of a row partitioned with it by `journal_month`: in SQL (run_id, journal_month)
    references the run, a composite key Django cannot declare, so there is no single-column
    constraint here; each such table's unique constraint leads with run_id, so no index either
    (step_index_unique_per_run, event_seq_unique_per_run, approval_request_once_per_step)."""
    return models.ForeignKey(
        Run,
        on_delete=on_delete,
        related_name=related_name,
        db_constraint=False,
        db_index=False,
    )


class Step(models.Model):
    """Partitioned by `journal_month` (the run's); in the database the primary key is
    (id, run_id, journal_month) and (run_id, journal_month) references the run, so every row of
    a run sits in its run's month. Writers copy `journal_month` from the run."""

    run = _run_by_month(on_delete=models.CASCADE, related_name="steps")
    journal_month = models.DateField(editable=False)
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
        max_length=10, choices=ResolutionAction.choices, null=True, blank=True
    )
    resolution_by = models.CharField(max_length=150, null=True, blank=True)
    resolution_note = models.TextField(null=True, blank=True)
    resolution_at = models.DateTimeField(null=True, blank=True)
    # a supervisor's claim on an unknown step, so two people do not work it at once
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claim_expires_at = models.DateTimeField(null=True, blank=True)
    team = TeamField(db_constraint=False, db_index=False)  # its run's: (run, month, team) key

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "index", "journal_month"], name="step_index_unique_per_run"
            ),
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
            models.Index(
                fields=["intent_at"],
                condition=Q(state=StepState.AWAITING_APPROVAL),
                name="step_awaiting_approval_idx",
            ),
            # the review desk (unknown steps and steps awaiting approval together, oldest
            # first): the queue page and the nav badge's count on every page. The two partial
            # indexes above cannot serve `state IN (both)`, which then scanned every step.
            models.Index(
                fields=["intent_at", "id"],
                condition=Q(state__in=[StepState.UNKNOWN, StepState.AWAITING_APPROVAL]),
                name="step_desk_idx",
            ),
            # the review item's "similar past decisions": the latest decided steps of one tool
            models.Index(
                fields=["name", "-resolution_at"],
                condition=Q(resolution_action__isnull=False),
                name="step_decided_by_tool_idx",
            ),
            models.Index(fields=["idempotency_key"], name="step_key_idx"),
            # the console's "top failing steps" over a window of days
            models.Index(
                fields=["outcome_at"],
                condition=Q(state=StepState.ERROR),
                name="step_error_outcome_idx",
            ),
        ]
        ordering = ["run", "index"]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.index} {self.name}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """An update never writes `journal_month` nor `team_id` (the partition key and the team
        never change, and a step the journal kernel answered with does not carry the month)."""
        if not self._state.adding and kwargs.get("update_fields") is None:
            kwargs["update_fields"] = [
                f.attname
                for f in self._meta.concrete_fields
                if not f.primary_key and f.attname not in ("journal_month", "team_id")
            ]
        super().save(*args, **kwargs)

    @property
    def approval_request(self) -> "ApprovalRequest | None":
        """The step's approval request, if people must approve it (at most one:
        approval_request_once_per_step); read from `prefetch_related("approval_requests")`
        when the caller prefetched it."""
        return next(iter(self.approval_requests.all()), None)

    def claim_is_live(self, now: datetime) -> bool:
        """Someone claimed the step and the claim has not run out at `now` (the one rule)."""
        return (
            self.claimed_by_id is not None
            and self.claim_expires_at is not None
            and self.claim_expires_at > now
        )

    def claim_has_expired(self, now: datetime) -> bool:
        """Someone claimed the step and the claim ran out by `now`."""
        return self.claimed_by_id is not None and not self.claim_is_live(now)

    @property
    def total_tokens(self) -> int:
        return self.usage_input_tokens + self.usage_output_tokens


class Event(models.Model):
    """Append-only: a migration installs a trigger that refuses UPDATE and DELETE.

    Partitioned by `journal_month` as steps are (see Step); retention drops whole months."""

    run = _run_by_month(on_delete=models.PROTECT, related_name="events")
    journal_month = models.DateField(editable=False)
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    actor = models.CharField(max_length=200)
    at = models.DateTimeField()
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)
    team = TeamField(db_constraint=False, db_index=False)  # its run's: (run, month, team) key

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "seq", "journal_month"], name="event_seq_unique_per_run"
            ),
            models.CheckConstraint(condition=Q(seq__gte=1), name="event_seq_positive"),
        ]
        # event_recovery_at_idx (runs 0001, in SQL: its predicate reads the payload)
        ordering = ["run", "seq"]

    def __str__(self) -> str:
        return f"{self.run_id}@{self.seq} {self.type}"


class ApprovalRule(models.Model):
    """Write intents of `agent` (blank: every agent) whose tool name matches `tool_pattern` (a
    glob: `*` any run of characters) wait for `approvals_required` different people before they
    run. Read by the journal kernel (runs/sql/ledger.sql) at intent time.

    One row, made by a migration, is the forks' fence (`is_fork_fence`, never active by itself):
    the kernel names it as the rule of a fork's write a ForkFence holds. It is not on the
    approval rules page."""

    agent = models.CharField(max_length=100, blank=True, default="")
    tool_pattern = models.CharField(max_length=200)
    is_fork_fence = models.BooleanField(default=False, db_default=False, editable=False)
    approvals_required = models.PositiveSmallIntegerField(default=1)
    expires_after_seconds = models.PositiveIntegerField(null=True, blank=True)
    active = models.BooleanField(default=True)
    created_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    team = TeamField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["team", "agent", "tool_pattern"],
                name="approval_rule_unique_per_agent_tool",
                violation_error_message="This agent already has a rule for this tool pattern.",
            ),
            models.UniqueConstraint(
                fields=["team", "is_fork_fence"],
                condition=Q(is_fork_fence=True),
                name="approval_rule_one_fork_fence",
            ),
            models.CheckConstraint(
                condition=Q(is_fork_fence=False) | Q(active=False),
                name="approval_rule_fork_fence_inactive",
            ),
            models.CheckConstraint(
                condition=Q(approvals_required__in=[1, 2]),
                name="approval_rule_one_or_two",
                violation_error_message="A rule requires 1 or 2 approvals.",
            ),
            models.CheckConstraint(
                condition=Q(expires_after_seconds__isnull=True) | Q(expires_after_seconds__gte=60),
                name="approval_rule_expiry_sane",
                violation_error_message="An expiry is at least 60 seconds (or empty: never).",
            ),
        ]
        ordering = ["agent", "tool_pattern"]

    def __str__(self) -> str:
        return f"{self.agent or 'every agent'}: {self.tool_pattern} ({self.approvals_required})"


class ForkFence(models.Model):
    """A tool whose writes a fork holds for a person's approval: the original already made them
    after the fork point and the admin chose not to run them again (runs.services.forks.run_fork).
    Read by the journal kernel (runs/sql/ledger.sql) at a write intent of the fork."""

    pk = models.CompositePrimaryKey("run_id", "tool")
    run = models.ForeignKey(
        Run,
        on_delete=models.CASCADE,
        related_name="fork_fences",
        db_constraint=False,  # ON DELETE CASCADE in SQL (runs 0001), as a retention delete needs
    )
    tool = models.CharField(max_length=200)
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    team = TeamField(db_constraint=False, db_index=False)  # its run's (teams_team_fill checks)

    def __str__(self) -> str:
        return f"{self.run_id}: {self.tool}"


class ApprovalRequest(models.Model):
    """One step waiting for approval; bound to (run, index, arguments hash) through its step.

    Keyed by its run like the journal: in the database the primary key is (id, run_id),
    (step_id, run_id, journal_month) references the step (ON DELETE CASCADE) and
    (run_id, journal_month) the run (runs 0001). Writers copy `run_id` and `journal_month`
    from the step. One request a step: approval_request_once_per_step."""

    run = _run_by_month(on_delete=models.CASCADE, related_name="+")
    journal_month = models.DateField(editable=False)
    step = models.ForeignKey(
        Step,
        on_delete=models.CASCADE,
        related_name="approval_requests",
        db_constraint=False,  # the composite key (step_id, run_id, journal_month), in SQL
    )
    rule = models.ForeignKey(ApprovalRule, null=True, blank=True, on_delete=models.SET_NULL)
    arguments_hash = models.CharField(max_length=64)
    approvals_required = models.PositiveSmallIntegerField()
    requested_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(
        max_length=10, choices=ApprovalOutcome.choices, default=ApprovalOutcome.PENDING
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    team = TeamField(db_constraint=False, db_index=False)  # its run's: (run, month, team) key

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "step"], name="approval_request_once_per_step")
        ]
        indexes = [
            models.Index(
                fields=["expires_at"],
                condition=Q(outcome=ApprovalOutcome.PENDING, expires_at__isnull=False),
                name="approval_pending_expiry_idx",
            )
        ]

    def __str__(self) -> str:
        return f"approval of {self.step_id}: {self.outcome}"


class Approval(models.Model):
    """One person's approval; two from the same person never count twice (four eyes).

    Keyed by its run: primary key (id, run_id), (request_id, run_id) references the request
    (ON DELETE CASCADE), run_id the run (runs 0001); `run_id` is the request's."""

    run = models.ForeignKey(
        Run,
        on_delete=models.CASCADE,
        related_name="+",
        db_constraint=False,  # in SQL, beside the composite key to the request
        db_index=False,  # approval_once_per_person leads with run_id
    )
    request = models.ForeignKey(
        ApprovalRequest,
        on_delete=models.CASCADE,
        related_name="approvals",
        db_constraint=False,  # the composite key (request_id, run_id), in SQL
    )
    by = models.CharField(max_length=150)
    note = models.TextField(blank=True, default="")
    at = models.DateTimeField()
    team = TeamField(db_constraint=False, db_index=False)  # its run's (teams_team_fill checks)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "request", "by"], name="approval_once_per_person"
            )
        ]
        ordering = ["at"]

    def __str__(self) -> str:
        return f"{self.by} approved {self.request_id}"


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
    team = TeamField()  # the team whose runs it creates and sees

    class Meta:
        ordering = ["name", "created_at"]
        constraints = [
            # a name says which worker or host uses the token: two live ones of one name could
            # not be told apart (a revoked token's name may be used again)
            models.UniqueConstraint(
                fields=["team", "name"],
                condition=Q(revoked_at__isnull=True),
                name="worker_token_active_name_unique",
                violation_error_message="A token of this name is in use; revoke it first or "
                "choose another name.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @property
    def scopes(self) -> frozenset[str]:
        return frozenset(self.scope.split())
