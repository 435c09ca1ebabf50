"""A supervisor's decisions in review: an unknown step resolved, a run in review resumed or
abandoned.

Locks: the caller holds no lock on the run; `step_resolve` and `run_review_decide` take the
run's row lock through `kernel.transition` (the run first, then the step). They may run inside
a caller's transaction (the desk's, with its audit entry): the lock is then kept until it ends.
"""

from typing import Any
from uuid import UUID

from runs import clock
from runs.api_errors import ApplicationError, invalid, note_required
from runs.constants import (
    RUN_TRANSITIONS,
    EventType,
    Resolution,
    RunStatus,
    StatusReason,
    StepState,
)
from runs.kernel import event_append, run_move, step_move, transition
from runs.models import Run, Step
from runs.services._shared import _resume_after_review


def resolution_validate(*, action: str, note: str, result: Any = None) -> None:
    """What a decision on an unknown step must hold: a note, a known action, and an observed
    result only with `sent` (what the person saw the tool do)."""
    if not note or not note.strip():
        raise invalid("note", "A note is required.", "Required.")
    if action not in Resolution.values:
        raise invalid("action", "Unknown action.", f"One of {Resolution.values}.")
    if result is not None and action != Resolution.SENT:
        raise invalid(
            "result",
            "An observed result only goes with 'mark as sent'.",
            "Only with the action sent: what the person saw the tool do.",
        )


def step_resolve(
    *, run_id: UUID | str, index: int, action: str, note: str, by: str, result: Any = None
) -> Step:
    """A supervisor's decision on an `unknown` step: sent, retry (same key) or abandon.

    A second resolution of the same step is refused with who already decided, and when.
    """
    resolution_validate(action=action, note=note, result=result)
    with transition(run_id, actor=f"user:{by}") as t:
        run = t.run
        step = Step.objects.select_for_update().filter(run=run, index=index).first()
        if step is None:
            raise ApplicationError(
                "not_found", f"Run {run_id} has no step {index}.", status_code=404
            )
        if step.resolution_action is not None:
            assert step.resolution_at is not None
            raise ApplicationError(
                "already_resolved",
                f"{step.resolution_by} already resolved this step as {step.resolution_action} at {step.resolution_at:%Y-%m-%d %H:%M:%S} UTC.",
                details={
                    "by": step.resolution_by,
                    "action": step.resolution_action,
                    "at": step.resolution_at.isoformat(),
                    "note": step.resolution_note,
                },
            )
        if step.state != StepState.UNKNOWN:
            raise ApplicationError(
                "not_unknown",
                f"Step {index} is {step.state}; only unknown steps are resolved.",
                details={"state": step.state},
            )
        now = clock.now()
        if action == Resolution.SENT:
            step_move(step, StepState.DONE)
            step.result = result if result is not None else {"resolved_as": "sent"}
            step.outcome_at = now
        elif action == Resolution.RETRY:
            step_move(step, StepState.INTERRUPTED)
        else:
            step_move(step, StepState.ABANDONED)
            step.outcome_at = now
        step.resolution_action = action
        step.resolution_by = by
        step.resolution_note = note.strip()
        step.resolution_at = now
        step.claimed_by = None
        step.claim_expires_at = None
        step.save()
        event_append(
            run,
            type=EventType.STEP_RESOLVED,
            payload={
                "index": index,
                "action": action,
                "note": step.resolution_note,
                "by": by,
                "result": step.result if action == Resolution.SENT else None,
            },
            actor=f"user:{by}",
            at=now,
        )
        if action == Resolution.ABANDON:
            if RunStatus.ABANDONED in RUN_TRANSITIONS[run.status]:
                run_move(run, RunStatus.ABANDONED, reason=StatusReason.STEP_ABANDONED)
                event_append(
                    run,
                    type=EventType.RUN_ABANDONED,
                    payload={"index": index, "note": step.resolution_note},
                    actor=f"user:{by}",
                    at=now,
                )
        elif (
            run.status == RunStatus.NEEDS_REVIEW
            and not Step.objects.filter(run=run, state=StepState.UNKNOWN).exists()
        ):
            _resume_after_review(run, actor=f"user:{by}", now=now, why=StatusReason.RESOLVED)
        return step


def run_review_decide(*, run_id: UUID | str, action: str, note: str, by: str) -> Run:
    """A run in review with no unknown step (a crash loop): resume it, or abandon it."""
    note_required(note)
    with transition(run_id, actor=f"user:{by}") as t:
        run = t.run
        if run.status != RunStatus.NEEDS_REVIEW:
            raise ApplicationError(
                "not_in_review", f"The run is {run.status}.", details={"status": run.status}
            )
        now = clock.now()
        if action == Resolution.ABANDON:
            run_move(run, RunStatus.ABANDONED, reason=StatusReason.ABANDONED_IN_REVIEW)
            event_append(
                run,
                type=EventType.RUN_ABANDONED,
                payload={"note": note.strip()},
                actor=f"user:{by}",
                at=now,
            )
        elif action == "resume":
            if Step.objects.filter(run=run, state=StepState.UNKNOWN).exists():
                raise ApplicationError("unknown_steps", "Resolve the run's unknown steps first.")
            if run.used_recoveries >= run.limit_recoveries:
                run.limit_recoveries = run.used_recoveries + 1
            _resume_after_review(
                run, actor=f"user:{by}", now=now, why=StatusReason.RESUMED, note=note.strip()
            )
        else:
            raise ApplicationError(
                "validation_error",
                "Unknown action.",
                status_code=400,
                details={"action": ["resume or abandon"]},
            )
        return run
