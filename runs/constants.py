"""Statuses, state names and the transition tables: written down once, read by services and tests."""

from django.db import models

# the journal's vocabulary is Django-free (the offline verifier and the bench read it)
from runs.vocabulary import BUDGET_LIMITS as BUDGET_LIMITS
from runs.vocabulary import EventType as EventType
from runs.vocabulary import StatusReason as StatusReason


class RunStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    NEEDS_REVIEW = "needs_review"
    COMPLETED = "completed"
    FAILED = "failed"
    ABANDONED = "abandoned"
    BUDGET_EXCEEDED = "budget_exceeded"
    CANCELLED = "cancelled"


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
    # a write intent an approval rule matched: it runs only after people approve it
    AWAITING_APPROVAL = "awaiting_approval"
    DENIED = "denied"


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
    """A supervisor's decision on an `unknown` step."""

    SENT = "sent"
    RETRY = "retry"
    ABANDON = "abandon"


class ResolutionAction(models.TextChoices):
    """What a step's `resolution.action` may hold: a Resolution, or the end of an approval."""

    SENT = "sent"
    RETRY = "retry"
    ABANDON = "abandon"
    DENY = "deny"  # a person denied the step before it ran
    EXPIRE = "expire"  # nobody decided before the rule's expiry


class ForkWrite(models.TextChoices):
    """What a fork does with a tool whose writes already happened in the original after the
    fork point (runs.services.forks.run_fork): hold each of its writes for a person's approval, or
    run them again."""

    HOLD = "hold"
    AGAIN = "again"


class ApprovalOutcome(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


# An agent's name, wherever one is given (a run, a token's agents, a policy, an approval rule):
# letters, digits and _ . : - (the run API's pattern), at most 100 characters
AGENT_NAME_REGEX = r"^[A-Za-z0-9_.:\-]+$"
AGENT_NAME_MAX = 100
AGENT_NAME_RULE = "letters, digits and _ . : - only, at most 100 characters"


def agent_name_valid(name: str) -> bool:
    import re

    return len(name) <= AGENT_NAME_MAX and re.fullmatch(AGENT_NAME_REGEX, name) is not None


LIVE_STATUSES = frozenset(
    {RunStatus.PENDING, RunStatus.RUNNING, RunStatus.INTERRUPTED, RunStatus.NEEDS_REVIEW}
)
FINAL_STATUSES = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ABANDONED, RunStatus.CANCELLED}
)
# an admin may cancel any run that is not final (the run actions of the console)
CANCELLABLE_STATUSES = frozenset(set(RunStatus.values) - FINAL_STATUSES)
# budget_exceeded is neither live nor final: nothing runs, but an admin may raise the limits.

RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    RunStatus.PENDING: frozenset(
        {RunStatus.RUNNING, RunStatus.BUDGET_EXCEEDED, RunStatus.ABANDONED, RunStatus.CANCELLED}
    ),
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.RUNNING,  # a new lease after expiry or a restart of the same worker
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.INTERRUPTED,
            RunStatus.NEEDS_REVIEW,
            RunStatus.BUDGET_EXCEEDED,
            RunStatus.CANCELLED,
        }
    ),
    RunStatus.INTERRUPTED: frozenset(
        {
            RunStatus.RUNNING,
            RunStatus.NEEDS_REVIEW,
            RunStatus.BUDGET_EXCEEDED,
            RunStatus.ABANDONED,
            RunStatus.CANCELLED,
        }
    ),
    RunStatus.NEEDS_REVIEW: frozenset(
        {RunStatus.RUNNING, RunStatus.ABANDONED, RunStatus.BUDGET_EXCEEDED, RunStatus.CANCELLED}
    ),
    RunStatus.BUDGET_EXCEEDED: frozenset(
        {RunStatus.RUNNING, RunStatus.ABANDONED, RunStatus.CANCELLED}
    ),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.ABANDONED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}

STEP_TRANSITIONS: dict[str, frozenset[str]] = {
    StepState.INTENT: frozenset(
        {
            StepState.DONE,
            StepState.ERROR,
            StepState.INTERRUPTED,
            StepState.UNKNOWN,
            StepState.AWAITING_APPROVAL,  # in the same call, when an approval rule matches
        }
    ),
    # approved: back to `intent` (not yet handed to a worker: executions = 0); or denied/expired
    StepState.AWAITING_APPROVAL: frozenset({StepState.INTENT, StepState.DENIED}),
    StepState.DENIED: frozenset(),
    # an interrupted step is re-executed: a new intent, or (read steps) intent+outcome at once
    StepState.INTERRUPTED: frozenset({StepState.INTENT, StepState.DONE, StepState.ERROR}),
    StepState.UNKNOWN: frozenset({StepState.DONE, StepState.INTERRUPTED, StepState.ABANDONED}),
    StepState.DONE: frozenset(),
    StepState.ERROR: frozenset(),
    StepState.ABANDONED: frozenset(),
}
