"""The names a run's journal speaks: event types, status reasons, budget limits.

Django-free on purpose: the offline export verifier, the bench's bulk generator and the agents
import them without starting Django. `runs.constants` re-exports them beside the statuses.
Product code names an event type or a status reason by these enums, never by a string literal
(tests/test_one_source.py greps for them).
"""

from enum import StrEnum

BUDGET_LIMITS = ("steps", "tokens", "cost_usd", "wall_seconds", "recoveries")


class StatusReason(StrEnum):
    """Why a run is in its status (`Run.status_reason`); a budget stop names its limit."""

    NONE = ""
    UNKNOWN_STEP = "unknown_step"
    RECOVERIES = "recoveries"
    LEASE_EXPIRED = "lease_expired"
    STEP_ABANDONED = "step_abandoned"
    ABANDONED_IN_REVIEW = "abandoned_in_review"
    RESOLVED = "resolved"
    RESUMED = "resumed"
    LIMITS_RAISED = "limits_raised"
    CANCELLED = "cancelled"
    WALL_SECONDS = "wall_seconds"
    STEPS = "steps"
    TOKENS = "tokens"
    COST_USD = "cost_usd"


class EventType(StrEnum):
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
    RUN_CANCELLED = "run_cancelled"
    RUN_FORKED = "run_forked"  # on the original: a fork was made from it
    STEP_COPIED = "step_copied"  # on the fork: a step copied from the original, never re-run
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_GIVEN = "approval_given"
    STEP_APPROVED = "step_approved"
    STEP_DENIED = "step_denied"
    RUN_LEGAL_HOLD_SET = "run_legal_hold_set"  # an admin: retention must keep the run
    RUN_LEGAL_HOLD_LIFTED = "run_legal_hold_lifted"
