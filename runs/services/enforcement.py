"""Background enforcement (beat): expired leases (the reaper), deadlines, idle re-dispatch.

Locks: the callers (beat tasks) hold no lock. `run_lease_expire` and `run_deadline_enforce`
take the run's row lock themselves with SKIP LOCKED: a run someone else holds is left for the
next sweep. `runs_redispatch_idle` and `run_runner_claim_for_celery` lock nothing: each is a
guarded UPDATE.
"""

from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from runs import clock, kernel
from runs.constants import RunRunner, RunStatus, StepState
from runs.models import Run, Step
from runs.services._shared import _offer_on_commit
from runs.services.recovery import HolderStillJournalling, lookup_tools, with_tool_side_answers
from runs.signals import run_resumable

# the statuses a passed deadline stops (a run in review or over budget already waits for a person)
DEADLINE_STATUSES = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.INTERRUPTED)


def _awaits_approval(run_id: UUID | str) -> bool:
    return Step.objects.filter(run_id=run_id, state=StepState.AWAITING_APPROVAL).exists()


def run_lease_expire(*, run_id: UUID | str, actor: str = "system:reaper") -> Run | None:
    """The reaper's work for one run: the kernel's `ledger_lease_expire` (the recovery rules, a
    new epoch that fences the lost worker, interrupted or needs_review), the tool side asked
    before it (runs.services.recovery); then the run is offered to the workers again. A holder
    still journalling under its expired lease is left alone until the next sweep (None)."""
    tools = lookup_tools()
    try:
        run = with_tool_side_answers(
            lambda answers: kernel.lease_expire(
                run_id=run_id, actor=actor, answers=answers, lookup_tools=tools
            )
        )
    except HolderStillJournalling:
        return None
    if run is not None and run.status == RunStatus.INTERRUPTED and not _awaits_approval(run.pk):
        # (a run whose step waits for people is offered again by the decision itself)
        _offer_on_commit(run, reason="interrupted")
    return run


def runs_reap_expired_leases(*, limit: int = 500) -> int:
    now = clock.now()
    ids = list(
        Run.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now)
        .order_by("lease_expires_at")
        .values_list("pk", flat=True)[:limit]
    )
    return sum(1 for run_id in ids if run_lease_expire(run_id=run_id) is not None)


def runs_redispatch_idle(*, idle_seconds: int | None = None, limit: int = 500) -> int:
    """Offer runs nobody works on to the workers again: their dispatch may have been lost.

    The reaper covers expired leases; a run whose task vanished before any lease (the broker
    lost its queue) stays `pending`, or `interrupted` / resumed-without-lease when the
    re-dispatch itself was lost. Such a run, unchanged for `idle_seconds`, gets `run_resumable`
    again (reason "idle"), and its updated_at is touched by a guarded update, so it is offered
    at most once per period. A duplicate dispatch is harmless: the journal turns it into a
    lease refusal or a replay.
    """
    idle = settings.LEDGER_REDISPATCH_IDLE_SECONDS if idle_seconds is None else idle_seconds
    now = clock.now()
    cutoff = now - timedelta(seconds=idle)
    nobody_on_it = Q(status__in=[RunStatus.PENDING, RunStatus.INTERRUPTED]) | Q(
        status=RunStatus.RUNNING, lease_worker__isnull=True
    )
    waiting_for_people = Step.objects.filter(
        run_id=OuterRef("pk"), state=StepState.AWAITING_APPROVAL
    )
    candidates = list(
        Run.objects.filter(nobody_on_it, updated_at__lt=cutoff, runner=RunRunner.CELERY)
        .exclude(Exists(waiting_for_people))
        .order_by("updated_at")
        .values_list("pk", "agent")[:limit]
    )
    offered = 0
    for run_id, agent in candidates:
        if Run.objects.filter(nobody_on_it, pk=run_id, updated_at__lt=cutoff).update(
            updated_at=now
        ):
            run_resumable.send(sender=Run, run_id=run_id, agent=agent, reason="idle")
            offered += 1
    return offered


def run_runner_claim_for_celery(*, run_id: UUID | str) -> bool:
    """The agents' Celery task starting a run that never started makes it a `celery` run (so the
    reaper re-dispatches it). A run already under way keeps its runner. Returns whether it is
    a celery run now."""
    Run.objects.filter(pk=run_id, status=RunStatus.PENDING, runner=RunRunner.EXTERNAL).update(
        runner=RunRunner.CELERY
    )
    return Run.objects.filter(pk=run_id, runner=RunRunner.CELERY).exists()


def run_deadline_enforce(*, run_id: UUID | str, actor: str = "system:deadlines") -> Run | None:
    with transaction.atomic():
        run = Run.objects.select_for_update(skip_locked=True).filter(pk=run_id).first()
        now = clock.now()
        if run is None or run.status not in DEADLINE_STATUSES or now < run.deadline:
            return None
        # past its deadline: wall_seconds (the row is as locked: nothing changed yet)
        limit = kernel.exceeded_limit(run.pk, now=now, next_step=False)
        assert limit is not None
        kernel.run_budget_stop(run, limit, actor=actor, now=now)
        run.lease_worker = None
        run.lease_expires_at = None
        run.save()
        return run


def runs_enforce_deadlines(*, limit: int = 500) -> int:
    now = clock.now()
    ids = list(
        Run.objects.filter(status__in=DEADLINE_STATUSES, deadline__lte=now).values_list(
            "pk", flat=True
        )[:limit]
    )
    return sum(1 for run_id in ids if run_deadline_enforce(run_id=run_id) is not None)
