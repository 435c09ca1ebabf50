"""Private moves that more than one concern makes: the resume after a review, and
the offer of a run to the Celery workers once the transaction commits. (The refusal a run's
status gives a worker is the kernel's: `ledger_status_refusal`, in its statements.)

Locks: every helper here runs under the run's row lock, which its caller holds (through
`kernel.transition` or `lock_objects.run_for_update`); none takes a lock itself.
"""

from datetime import datetime

from django.db import transaction

from runs.constants import EventType, RunRunner, RunStatus, StatusReason
from runs.kernel import event_append, run_move
from runs.models import Run
from runs.signals import run_resumable


def _offer_on_commit(run: Run, *, reason: str) -> None:
    """Offer a resumable run to the Celery workers once this transaction commits: only runs whose
    runner is `celery`; an external run is resumed by its own process, never taken over."""
    if run.runner != RunRunner.CELERY:
        return
    _resumable_on_commit(run, reason=reason)


def _resumable_on_commit(run: Run, *, reason: str) -> None:
    """Send `run_resumable` for the run once this transaction commits (the agents app listens)."""
    transaction.on_commit(
        lambda: run_resumable.send(sender=Run, run_id=run.pk, agent=run.agent, reason=reason)
    )


def _resume_after_review(
    run: Run, *, actor: str, now: datetime, why: StatusReason, note: str | None = None
) -> None:
    """needs_review → running without a lease; the next lease is not a recovery.

    The epoch moves on: whoever held the run before the decision is fenced off, so a retry the
    supervisor approved runs once, under the next lease.
    """
    run_move(run, RunStatus.RUNNING, reason=why)
    run.lease_worker = None
    run.lease_expires_at = None
    run.epoch += 1
    event_append(
        run,
        type=EventType.RUN_RESUMED,
        payload={"why": why, "epoch": run.epoch, **({"note": note} if note else {})},
        actor=actor,
        at=now,
    )
    _offer_on_commit(run, reason=why)
