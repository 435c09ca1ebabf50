"""A worker's lease: the grant (with the recovery rules after a lost holder) and its heartbeat.

Locks: the caller holds no lock on the run. `run_lease_acquire` takes the run's row lock itself
(in the kernel's statement, or through `kernel.transition` when recovery is needed); so does
`run_heartbeat`, in the kernel. `_recover_for_lease` runs inside that transition.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from runs import kernel
from runs.api_errors import ApplicationError
from runs.constants import EventType, RunStatus, StatusReason
from runs.kernel import run_move, transition
from runs.models import Run, Step
from runs.services._shared import _needs_review
from runs.services.recovery import _recover_open_intents


@dataclass(frozen=True)
class LeaseGrant:
    run: Run
    epoch: int
    expires_at: datetime
    journal: list[Step]
    recovered: bool


def run_lease_acquire(
    *, run_id: UUID | str, worker: str, ttl_seconds: int, actor: str
) -> LeaseGrant:
    """Grant the lease, fencing every earlier holder with a new epoch.

    A lease after an expired one (or after the reaper interrupted the run, or a restart of the
    holder) runs the recovery rules first and counts one recovery.
    """
    try:
        granted = kernel.lease(run_id=run_id, worker=worker, ttl_seconds=ttl_seconds, actor=actor)
    except kernel.RecoveryNeeded:
        pass
    else:
        assert granted.lease_expires_at is not None
        journal = (
            list(Step.objects.filter(run_id=granted.pk).order_by("index"))
            if granted.step_count
            else []
        )
        return LeaseGrant(
            run=granted,
            epoch=granted.epoch,
            expires_at=granted.lease_expires_at,
            journal=journal,
            recovered=False,
        )
    return _lease_with_recovery(run_id=run_id, worker=worker, ttl_seconds=ttl_seconds, actor=actor)


def _lease_with_recovery(
    *, run_id: UUID | str, worker: str, ttl_seconds: int, actor: str
) -> LeaseGrant:
    """The lease after an expired or interrupted holder: the recovery rules, then the grant.

    A recovery that ends in review or over budget is kept (with its new epoch) and refused.
    """
    with transition(run_id, actor=actor) as t:
        run, now = t.run, t.now
        status_refusal = kernel.status_refusal(run.pk)
        if status_refusal is not None:
            raise status_refusal
        if (
            run.status == RunStatus.RUNNING
            and run.lease_worker not in (None, worker)
            and run.lease_expires_at is not None
            and run.lease_expires_at > now
        ):
            raise ApplicationError(
                "lease_held",
                "Another worker holds the lease.",
                details={
                    "worker": run.lease_worker,
                    "expires_at": run.lease_expires_at.isoformat(),
                },
            )
        recovering = run.status == RunStatus.INTERRUPTED or (
            run.status == RunStatus.RUNNING and run.lease_worker is not None
        )
        if recovering:
            _recover_for_lease(t)
        if t.refusal is None:
            run.save()  # the kernel's budget rule reads the row: with the recovery's changes
            limit = kernel.exceeded_limit(run.pk, now=now, next_step=False)
            if limit is not None:
                kernel.run_budget_stop(run, limit, actor=actor, now=now)
                t.refuse(kernel.refusal("budget_exceeded", limit.details, run_id=run.pk))
        if t.refusal is None:
            previous = run.lease_worker
            run_move(run, RunStatus.RUNNING)
            run.epoch += 1
            run.leases_granted += 1
            run.lease_worker = worker
            run.lease_expires_at = now + timedelta(seconds=ttl_seconds)
            run.lease_ttl_seconds = ttl_seconds
            t.event(
                EventType.LEASE_ACQUIRED,
                {
                    "worker": worker,
                    "epoch": run.epoch,
                    "expires_at": run.lease_expires_at.isoformat(),
                    "recovery": recovering,
                    "previous_worker": previous,
                    "replayable_steps": run.step_count,
                },
            )
    # reached only when nothing was refused (transition() raises the refusal after committing)
    assert run.lease_expires_at is not None
    return LeaseGrant(
        run=run,
        epoch=run.epoch,
        expires_at=run.lease_expires_at,
        journal=list(Step.objects.filter(run=run).order_by("index")),
        recovered=recovering,
    )


def _recover_for_lease(t: kernel.Transition) -> None:
    """The recovery rules for a new lease, and one recovery of budget; review when either says so."""
    run = t.run
    unknown = _recover_open_intents(run, actor=t.actor, now=t.now)
    if unknown:
        _needs_review(
            run,
            reason=StatusReason.UNKNOWN_STEP,
            actor=t.actor,
            now=t.now,
            details={"steps": [s.index for s in unknown]},
            fence=True,
        )
        t.refuse(
            ApplicationError(
                "needs_review",
                "The run waits for a supervisor's review.",
                details={"reason": run.status_reason},
            )
        )
        return
    run.used_recoveries += 1
    if run.used_recoveries > run.limit_recoveries:
        spent = {
            "limit": "recoveries",
            "limit_value": run.limit_recoveries,
            "used": run.used_recoveries,
        }
        _needs_review(
            run, reason=StatusReason.RECOVERIES, actor=t.actor, now=t.now, details=spent, fence=True
        )
        t.refuse(
            ApplicationError(
                "needs_review",
                "The run's recovery budget is spent; it waits for a supervisor.",
                details=spent,
            )
        )


def run_heartbeat(*, run_id: UUID | str, epoch: int) -> kernel.HeartbeatAnswer:
    """Extend the lease; no event (a heartbeat changes no state anyone reviews)."""
    return kernel.heartbeat(run_id=run_id, epoch=epoch)
