"""Statuses, state names and the transition tables: written down once, read by services and tests."""

from django.db import models


class RunStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    NEEDS_REVIEW = "needs_review"
    COMPLETED = "completed"
    FAILED = "failed"
    ABANDONED = "abandoned"
    BUDGET_EXCEEDED = "budget_exceeded"


class RunRunner(models.TextChoices):
    """Who runs a run: the agents' Celery task, or a process of its own (the SDK, a script)."""

    CELERY = "celery"  # started by start_agent_run / the run_agent task: Celery re-dispatches it
    EXTERNAL = "external"  # resumed only by its own process; never offered to Celery


class StepState(models.TextChoices):
    INTENT = "intent"
    DONE = "done"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    UNKNOWN = "unknown"
    ABANDONED = "abandoned"


class StepKind(models.TextChoices):
    TOOL = "tool"
    MODEL = "model"


class Effect(models.TextChoices):
    READ = "read"
    WRITE = "write"


class EnforcedBy(models.TextChoices):
    LEDGER = "ledger"
    TOOL = "tool"
    NOBODY = "nobody"


class Resolution(models.TextChoices):
    SENT = "sent"
    RETRY = "retry"
    ABANDON = "abandon"


LIVE_STATUSES = frozenset(
    {RunStatus.PENDING, RunStatus.RUNNING, RunStatus.INTERRUPTED, RunStatus.NEEDS_REVIEW}
)
FINAL_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ABANDONED})
# budget_exceeded is neither live nor final: nothing runs, but an admin may raise the limits.

RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    RunStatus.PENDING: frozenset(
        {RunStatus.RUNNING, RunStatus.BUDGET_EXCEEDED, RunStatus.ABANDONED}
    ),
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.RUNNING,  # a new lease after expiry or a restart of the same worker
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.INTERRUPTED,
            RunStatus.NEEDS_REVIEW,
            RunStatus.BUDGET_EXCEEDED,
        }
    ),
    RunStatus.INTERRUPTED: frozenset(
        {RunStatus.RUNNING, RunStatus.NEEDS_REVIEW, RunStatus.BUDGET_EXCEEDED, RunStatus.ABANDONED}
    ),
    RunStatus.NEEDS_REVIEW: frozenset(
        {RunStatus.RUNNING, RunStatus.ABANDONED, RunStatus.BUDGET_EXCEEDED}
    ),
    RunStatus.BUDGET_EXCEEDED: frozenset({RunStatus.RUNNING, RunStatus.ABANDONED}),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.ABANDONED: frozenset(),
}

STEP_TRANSITIONS: dict[str, frozenset[str]] = {
    StepState.INTENT: frozenset(
        {StepState.DONE, StepState.ERROR, StepState.INTERRUPTED, StepState.UNKNOWN}
    ),
    # an interrupted step is re-executed: a new intent, or (read steps) intent+outcome at once
    StepState.INTERRUPTED: frozenset({StepState.INTENT, StepState.DONE, StepState.ERROR}),
    StepState.UNKNOWN: frozenset({StepState.DONE, StepState.INTERRUPTED, StepState.ABANDONED}),
    StepState.DONE: frozenset(),
    StepState.ERROR: frozenset(),
    StepState.ABANDONED: frozenset(),
}

BUDGET_LIMITS = ("steps", "tokens", "cost_usd", "wall_seconds", "recoveries")


class EventType(models.TextChoices):
    """Every event a run's chain can hold; the journal kernel (runs/sql) writes the hot ones."""

    RUN_CREATED = "run_created"
    LEASE_ACQUIRED = "lease_acquired"
    LEASE_EXPIRED = "lease_expired"
    STEP_INTENT = "step_intent"
    STEP_DONE = "step_done"
    STEP_ERROR = "step_error"
    STEP_REOPENED = "step_reopened"
    STEP_INTERRUPTED = "step_interrupted"
    STEP_UNKNOWN = "step_unknown"
    STEP_RESOLVED = "step_resolved"
    RECONCILED = "reconciled"
    NEEDS_REVIEW = "needs_review"
    RUN_RESUMED = "run_resumed"
    RUN_COMPLETED = "run_completed"
    RUN_FAILED = "run_failed"
    RUN_ABANDONED = "run_abandoned"
    BUDGET_EXCEEDED = "budget_exceeded"
    LIMITS_RAISED = "limits_raised"
