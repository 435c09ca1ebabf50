"""Approvals of steps waiting for people: approve, deny, expire, and the worker's long poll.

Locks: the caller holds no lock on the run. Each decision takes the locks itself in one order:
the run, then the step, then its approval request (`_approval_locked`); the private helpers run
under them. `step_wait_decided` is called outside any transaction: it sleeps between its
reads, and locks only for the moment it records an expiry. A refusal of a decided request is raised after the transaction commits, so an expiry
found on the way stays recorded.
"""

import time
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import transaction

from runs import clock
from runs.api_errors import ApplicationError, note_required
from runs.constants import FINAL_STATUSES, ApprovalOutcome, EventType, ResolutionAction, StepState
from runs.kernel import event_append, step_move
from runs.lock_objects import run_for_update
from runs.models import Approval, ApprovalRequest, Run, Step
from runs.services._shared import _resumable_on_commit


def _approval_locked(run_id: UUID | str, index: int) -> tuple[Run, Step, ApprovalRequest]:
    """The run (locked, as everywhere: run first), its step and the step's approval request."""
    run = run_for_update(run_id)
    step = Step.objects.select_for_update().filter(run=run, index=index).first()
    request = (
        ApprovalRequest.objects.select_for_update().filter(run=run, step=step).first()
        if step
        else None
    )
    if step is None or request is None:
        raise ApplicationError(
            "not_found", f"Run {run_id} has no step {index} waiting for approval.", status_code=404
        )
    return run, step, request


def _approval_refusal(run: Run, step: Step, request: ApprovalRequest) -> ApplicationError | None:
    """Why this request takes no decision any more (who decided, and when), or None."""
    at = f"{request.decided_at:%Y-%m-%d %H:%M:%S} UTC" if request.decided_at else ""
    if request.outcome == ApprovalOutcome.DENIED:
        return ApplicationError(
            "approval_decided",
            f"{step.resolution_by} already denied this step at {at}: {step.resolution_note}",
            details={"outcome": request.outcome, "by": step.resolution_by, "at": at},
        )
    if request.outcome == ApprovalOutcome.EXPIRED:
        return ApplicationError(
            "approval_decided",
            f"Nobody decided in time: the approval expired at {at}.",
            details={"outcome": request.outcome, "at": at},
        )
    if request.outcome == ApprovalOutcome.APPROVED:
        names = ", ".join(a.by for a in request.approvals.all())
        return ApplicationError(
            "approval_decided",
            f"Already approved by {names} at {at}.",
            details={"outcome": request.outcome, "by": names, "at": at},
        )
    if run.status in FINAL_STATUSES:
        finished = f"{run.finished_at:%Y-%m-%d %H:%M:%S} UTC" if run.finished_at else "earlier"
        return ApplicationError(
            "run_finished",
            f"The run is {run.status} (since {finished}); there is nothing to approve.",
            details={"status": run.status},
        )
    return None


def _approval_end(
    run: Run,
    step: Step,
    request: ApprovalRequest,
    *,
    action: str,
    by: str,
    note: str,
    actor: str,
    now: datetime,
) -> None:
    """awaiting_approval → denied (a person's `deny`, or `expire`). Caller holds the locks."""
    step_move(step, StepState.DENIED)
    step.resolution_action = action
    step.resolution_by = by
    step.resolution_note = note
    step.resolution_at = now
    step.outcome_at = now
    expired = action == ResolutionAction.EXPIRE
    _approval_decided(
        run,
        step,
        request,
        ApprovalOutcome.EXPIRED if expired else ApprovalOutcome.DENIED,
        EventType.STEP_DENIED,
        {"index": step.index, "by": by, "note": note, "expired": expired},
        actor=actor,
        now=now,
        why="approval_decided",
    )


def _approval_decided(
    run: Run,
    step: Step,
    request: ApprovalRequest,
    outcome: str,
    event: EventType,
    payload: dict[str, Any],
    *,
    actor: str,
    now: datetime,
    why: str,
) -> None:
    """A request decided, once its step has moved: no claim is left on the step, the request
    keeps its `outcome`, the run's chain the `event`, and a worker is offered the run (`why`)."""
    step.claimed_by = None
    step.claim_expires_at = None
    step.save()
    request.outcome = outcome
    request.decided_at = now
    request.save(update_fields=["outcome", "decided_at"])
    event_append(run, type=event, payload=payload, actor=actor, at=now)
    _wake_worker(run, now=now, why=why)


def _wake_worker(run: Run, *, now: datetime, why: str) -> None:
    """After a decision: a run nobody holds a live lease on is offered to the workers again (a
    worker that waits sees the decision itself)."""
    if run.status in FINAL_STATUSES:
        return
    if run.lease_expires_at is not None and run.lease_expires_at > now:
        return
    _resumable_on_commit(run, reason=why)


def _expire_if_due(
    run: Run, step: Step, request: ApprovalRequest, *, now: datetime
) -> ApplicationError | None:
    if (
        request.outcome != ApprovalOutcome.PENDING
        or request.expires_at is None
        or request.expires_at > now
    ):
        return None
    note = f"No decision before {request.expires_at:%Y-%m-%d %H:%M:%S} UTC."
    _approval_end(
        run,
        step,
        request,
        action=ResolutionAction.EXPIRE,
        by="system:expiry",
        note=note,
        actor="system:approvals",
        now=now,
    )
    run.save()
    return _approval_refusal(run, step, request)


def _approval_opened(
    run_id: UUID | str, index: int
) -> tuple[Run, Step, ApprovalRequest, datetime, ApplicationError | None]:
    """The locked run, step and request, the time, and why they may not be decided now (None:
    they may; an expired request is recorded as expired first)."""
    run, step, request = _approval_locked(run_id, index)
    now = clock.now()
    refusal = _approval_refusal(run, step, request) or _expire_if_due(run, step, request, now=now)
    return run, step, request, now, refusal


def step_approve(*, run_id: UUID | str, index: int, by: str, note: str = "") -> Step:
    """One person's approval of a step waiting for it; the last one needed moves it to `intent`.

    The approval is bound to the step's (run, index, arguments hash) and used once: the step
    becomes an intent with `executions = 0` ("approved, not yet handed out"); the worker's
    next intent call for that index takes it (runs/sql/ledger.sql). Refused, with who
    and when: a request already decided (denied, expired, approved), one this person already
    approved (two approvals need two people), a finished run. An expired request is recorded
    as expired (committed) and then refused.
    """
    refusal: ApplicationError | None = None
    with transaction.atomic():
        run, step, request, now, refusal = _approval_opened(run_id, index)
        if refusal is None:
            given = list(request.approvals.all())
            mine = next((a for a in given if a.by == by), None)
            if mine is not None:
                raise ApplicationError(
                    "already_approved",
                    f"You approved this step at {mine.at:%Y-%m-%d %H:%M:%S} UTC; "
                    f"it needs {request.approvals_required} different people.",
                    details={"by": by, "at": mine.at.isoformat()},
                )
            if step.arguments_hash != request.arguments_hash:  # bound to what people saw
                raise ApplicationError(
                    "not_found", "The step's arguments changed.", status_code=404
                )
            Approval.objects.create(
                run_id=request.run_id, request=request, by=by, note=note.strip(), at=now
            )
            count = len(given) + 1
            event_append(
                run,
                type=EventType.APPROVAL_GIVEN,
                payload={
                    "index": index,
                    "by": by,
                    "note": note.strip(),
                    "arguments_hash": request.arguments_hash,
                    "approvals": count,
                    "approvals_required": request.approvals_required,
                },
                actor=f"user:{by}",
                at=now,
            )
            if count >= request.approvals_required:
                step_move(step, StepState.INTENT)
                step.executions = 0
                _approval_decided(
                    run,
                    step,
                    request,
                    ApprovalOutcome.APPROVED,
                    EventType.STEP_APPROVED,
                    {
                        "index": index,
                        "arguments_hash": request.arguments_hash,
                        "by": [a.by for a in given] + [by],
                    },
                    actor=f"user:{by}",
                    now=now,
                    why="approved",
                )
            run.save()
            return step
    assert refusal is not None
    raise refusal


def step_deny(*, run_id: UUID | str, index: int, by: str, note: str) -> Step:
    """A person's denial: the step becomes `denied` with the note; the worker's next call for
    it is refused with `approval_denied`. Refused like `step_approve` when already decided."""
    note = note_required(note)
    refusal: ApplicationError | None = None
    with transaction.atomic():
        run, step, request, now, refusal = _approval_opened(run_id, index)
        if refusal is None:
            _approval_end(
                run,
                step,
                request,
                action=ResolutionAction.DENY,
                by=by,
                note=note,
                actor=f"user:{by}",
                now=now,
            )
            run.save()
            return step
    assert refusal is not None
    raise refusal


def step_wait_decided(*, run_id: UUID | str, index: int, wait_seconds: int) -> Step:
    """The step; while it is awaiting_approval, up to `wait_seconds` for a decision (the worker's
    long poll: one request, a cheap indexed read twice a second, never inside a transaction).
    An approval past its expiry is expired here too, so a waiting worker learns it at once."""
    deadline = time.monotonic() + wait_seconds
    while True:
        step = Step.objects.filter(run_id=run_id, index=index).first()
        if step is None:
            raise ApplicationError(
                "not_found", f"Run {run_id} has no step {index}.", status_code=404
            )
        if step.state != StepState.AWAITING_APPROVAL:
            return step
        request = ApprovalRequest.objects.filter(run_id=step.run_id, step=step).first()
        now = clock.now()
        if request is not None and request.expires_at is not None and request.expires_at <= now:
            with transaction.atomic():
                run, locked, request = _approval_locked(run_id, index)
                _expire_if_due(run, locked, request, now=now)
            continue
        if time.monotonic() >= deadline:
            return step
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def approval_expire_if_due(*, run_id: UUID | str, index: int) -> bool:
    """Expire one step's approval when its time is up (its own transaction); True if it did.

    Callers that decide inside a transaction of their own (the desk, with its audit entry) call
    this first, so the expiry stays recorded when their decision is then refused."""
    with transaction.atomic():
        run, step, request = _approval_locked(run_id, index)
        return _expire_if_due(run, step, request, now=clock.now()) is not None


def approvals_expire_due(*, limit: int = 500) -> int:
    """Beat: pending approvals past their expiry become `denied` (action `expire`)."""
    now = clock.now()
    due = list(
        ApprovalRequest.objects.filter(outcome=ApprovalOutcome.PENDING, expires_at__lte=now)
        .order_by("expires_at")
        .values_list("run_id", "step__index")[:limit]
    )
    expired = 0
    for run_id, index in due:
        with transaction.atomic():
            run, step, request = _approval_locked(run_id, index)
            if _expire_if_due(run, step, request, now=clock.now()) is not None:
                expired += 1
    return expired
