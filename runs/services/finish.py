"""A worker's last call on a run: complete or fail it, accounting for steps still open.

Locks: the caller holds no lock on the run; `run_complete` / `run_fail` take the run's row lock
through `kernel.transition`. `_check_epoch` and `_open_steps_accounted` run under it.
"""

from datetime import datetime
from typing import Any
from uuid import UUID

from runs import clock, kernel
from runs.api_errors import ApplicationError
from runs.constants import Effect, EventType, RunStatus, StatusReason, StepState
from runs.kernel import event_append, run_move, step_move, transition
from runs.models import Run, Step
from runs.services._shared import _needs_review


def _check_epoch(run: Run, epoch: int) -> None:
    """stale_epoch for another epoch than the run's; run_finished for the epoch a cancelled run
    was cancelled under (cancel moves it, and its worker must learn the run is over, as the
    kernel's ledger_run_locked answers)."""
    if epoch != run.epoch:
        if run.status == RunStatus.CANCELLED and epoch == run.epoch - 1:
            raise kernel.refusal("run_finished", {"status": run.status}, run_id=run.pk)
        raise ApplicationError(
            "stale_epoch",
            "Another worker holds the run now; stop and write nothing more.",
            details={"epoch": epoch, "current_epoch": run.epoch},
        )


FINISH_EVENTS = {
    RunStatus.COMPLETED: EventType.RUN_COMPLETED,
    RunStatus.FAILED: EventType.RUN_FAILED,
}


def _open_steps_accounted(run: Run, *, finish: str, actor: str, now: datetime) -> list[Step]:
    """Before a run is completed or failed, every step still `intent` is accounted for: a write
    may have happened (its tool may be running right now), so it becomes `unknown` for a
    person, as recovery does with a maybe-sent step; a read has no effect, and a write approved
    but never handed out never ran: both are `interrupted`. Returns the unknown steps."""
    unknown: list[Step] = []
    for step in Step.objects.filter(run=run, state=StepState.INTENT).order_by("index"):
        payload: dict[str, Any] = {
            "index": step.index,
            "name": step.name,
            "idempotency_key": step.idempotency_key,
        }
        if step.effect == Effect.WRITE and step.executions > 0:
            step_move(step, StepState.UNKNOWN)
            event_type = EventType.STEP_UNKNOWN
            payload["why"] = (
                f"the worker asked to {finish} the run with this write still open: "
                "it may have been sent"
            )
            unknown.append(step)
        else:
            step_move(step, StepState.INTERRUPTED)
            event_type = EventType.STEP_INTERRUPTED
            payload["why"] = f"still open when the worker asked to {finish} the run"
        step.save()
        event_append(run, type=event_type, payload=payload, actor=actor, at=now)
    return unknown


def _run_finish(
    *, run_id: UUID | str, epoch: int, to: RunStatus, field: str, value: Any, actor: str
) -> Run:
    """Complete or fail a running run; one with a write still open goes to review instead
    (409 `needs_review`, kept: the steps are `unknown`, the run `needs_review`)."""
    with transition(run_id, actor=actor) as t:
        run = t.run
        _check_epoch(run, epoch)
        if run.status == to and getattr(run, field) == value:
            return run
        if run.status != RunStatus.RUNNING:
            refusal = kernel.status_refusal(run.pk) or ApplicationError(
                "stale_epoch",
                "The run is not running under this lease.",
                details={"status": run.status},
            )
            raise refusal
        now = clock.now()
        finish = "complete" if to == RunStatus.COMPLETED else "fail"
        unknown = _open_steps_accounted(run, finish=finish, actor=actor, now=now)
        if unknown:
            steps = [s.index for s in unknown]
            _needs_review(
                run,
                reason=StatusReason.UNKNOWN_STEP,
                actor=actor,
                now=now,
                details={"steps": steps, "finish": finish, field: value},
            )  # not fenced: the same worker asking again hears needs_review, not stale_epoch
            t.refuse(
                ApplicationError(
                    "needs_review",
                    f"The run was not {to}: its write step(s) {steps} are still open and may "
                    "have happened; a supervisor reviews them.",
                    details={"reason": run.status_reason, "steps": steps},
                )
            )
            return run
        setattr(run, field, value)
        run_move(run, to)
        event_append(run, type=FINISH_EVENTS[to], payload={field: value}, actor=actor, at=now)
        return run


def run_complete(*, run_id: UUID | str, epoch: int, output: Any, actor: str) -> Run:
    return _run_finish(
        run_id=run_id,
        epoch=epoch,
        to=RunStatus.COMPLETED,
        field="output",
        value=output,
        actor=actor,
    )


def run_fail(*, run_id: UUID | str, epoch: int, error: Any, actor: str) -> Run:
    return _run_finish(
        run_id=run_id, epoch=epoch, to=RunStatus.FAILED, field="error", value=error, actor=actor
    )
