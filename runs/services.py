"""Every state change of a run or step, each in one transaction with its Event row.

The caller of a private `_` helper holds the run's row lock (SELECT ... FOR UPDATE); the public
services take it themselves through `lock_objects.run_for_update`.
"""

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q

from runs import clock, kernel
from runs.api_errors import ApplicationError, invalid, note_required
from runs.canonical import GENESIS_HASH, arguments_hash
from runs.constants import (
    BUDGET_LIMITS,
    FINAL_STATUSES,
    RUN_TRANSITIONS,
    ApprovalOutcome,
    Effect,
    EnforcedBy,
    EventType,
    ForkWrite,
    Resolution,
    ResolutionAction,
    RunRunner,
    RunStatus,
    StatusReason,
    StepState,
)
from runs.kernel import (
    event_append,
    money,
    run_move,
    step_move,
    transition,
)
from runs.lock_objects import run_for_update
from runs.models import (
    Approval,
    ApprovalRequest,
    ApprovalRule,
    BudgetPolicy,
    ForkFence,
    Run,
    Step,
)
from runs.recovery import key_state_lookup
from runs.signals import run_resumable
from tools.lookups import tool_lookup

logger = logging.getLogger(__name__)


# --- budgets --------------------------------------------------------------------------------


def budget_policy_for(agent: str) -> BudgetPolicy:
    """The agent's own policy, else the default one (seeded by its migration,
    runs/default_policy.py); neither is a refusal, never limits from elsewhere."""
    policies = {
        (p.agent, p.is_default): p
        for p in BudgetPolicy.objects.filter(agent=agent)
        | BudgetPolicy.objects.filter(is_default=True)
    }
    policy = policies.get((agent, False)) or policies.get((None, True))
    if policy is None:
        raise ApplicationError(
            "no_budget_policy",
            f"Agent {agent!r} has no budget policy and there is no default policy; "
            "an admin must create one before runs can start.",
            details={"agent": agent},
        )
    return policy


def budget_of(run: Run) -> dict[str, Any]:
    """A run's limits (`limit_<name>`) and use (`used_<name>`, no use of wall time) by limit name."""

    def shown(name: str, value: Any) -> Any:
        return money(value) if name == "cost_usd" and value is not None else value

    return {
        "limits": {name: shown(name, getattr(run, f"limit_{name}")) for name in BUDGET_LIMITS},
        "used": {
            name: shown(name, getattr(run, f"used_{name}"))
            for name in BUDGET_LIMITS
            if name != "wall_seconds"
        },
        "deadline": run.deadline.isoformat(),
    }


def _exceeded_limit(run: Run, *, now: datetime, next_step: bool) -> dict[str, Any] | None:
    """The first limit the run has reached, or None. `next_step`: would one more intent fit?"""
    if now >= run.deadline:
        return {
            "limit": "wall_seconds",
            "limit_value": run.limit_wall_seconds,
            "deadline": run.deadline.isoformat(),
        }
    if next_step and run.used_steps >= run.limit_steps:
        return {"limit": "steps", "limit_value": run.limit_steps, "used": run.used_steps}
    if run.used_tokens > run.limit_tokens or (next_step and run.used_tokens >= run.limit_tokens):
        return {"limit": "tokens", "limit_value": run.limit_tokens, "used": run.used_tokens}
    if run.limit_cost_usd is not None and (
        run.used_cost_usd > run.limit_cost_usd
        or (next_step and run.used_cost_usd >= run.limit_cost_usd)
    ):
        return {
            "limit": "cost_usd",
            "limit_value": money(run.limit_cost_usd),
            "used": money(run.used_cost_usd),
        }
    return None


def _budget_exceed(run: Run, limit: dict[str, Any], *, actor: str, now: datetime) -> None:
    run_move(run, RunStatus.BUDGET_EXCEEDED, reason=limit["limit"])
    event_append(run, type=EventType.BUDGET_EXCEEDED, payload=limit, actor=actor, at=now)
    run.save()


def _refusal_for_status(run: Run) -> ApplicationError | None:
    """The refusal a run's status gives a worker's write: the kernel's words (kernel.refusal)."""
    if run.status == RunStatus.NEEDS_REVIEW:
        return kernel.refusal("needs_review", {"reason": run.status_reason}, run_id=run.pk)
    if run.status == RunStatus.BUDGET_EXCEEDED:
        return kernel.refusal("budget_exceeded", {"limit": run.status_reason}, run_id=run.pk)
    if run.status in FINAL_STATUSES:
        return kernel.refusal("run_finished", {"status": run.status}, run_id=run.pk)
    return None


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


# --- runs -----------------------------------------------------------------------------------


def limits_copied(source: BudgetPolicy | Run, prefix: str) -> dict[str, Any]:
    """A new run's limit_* fields, copied from its policy's max_* or from another run's limit_*
    (a fork): a run keeps the limits it was created with."""
    return {f"limit_{name}": getattr(source, f"{prefix}{name}") for name in BUDGET_LIMITS}


def run_create(
    *,
    agent: str,
    input: Any,
    external_id: str | None = None,
    actor: str,
    runner: str = RunRunner.EXTERNAL,
) -> tuple[Run, bool]:
    """Create a run with its policy's limits copied in; the same (agent, external_id) attaches.

    `runner`: `celery` for runs the agents' Celery task runs (re-dispatched by the reaper and the
    idle sweep), `external` for every other caller (resumed only by its own process).
    """
    if external_id is not None:
        existing = Run.objects.filter(agent=agent, external_id=external_id).first()
        if existing is not None:
            return existing, False
    policy = budget_policy_for(agent)
    limits = limits_copied(policy, "max_")
    now = clock.now()
    try:
        with transaction.atomic():
            run = Run(
                agent=agent,
                external_id=external_id,
                input=input,
                runner=runner,
                policy=policy,
                **limits,
                deadline=now + timedelta(seconds=limits["limit_wall_seconds"]),
                event_head=GENESIS_HASH,
            )
            run.save(force_insert=True)
            event_append(
                run,
                type=EventType.RUN_CREATED,
                payload={
                    "agent": agent,
                    "external_id": external_id,
                    "policy": policy.name if policy else None,
                    "limits": budget_of(run)["limits"],
                    "runner": runner,
                },
                actor=actor,
                at=now,
            )
            run.save(update_fields=["event_seq", "event_head"])
    except IntegrityError:
        existing = Run.objects.filter(agent=agent, external_id=external_id).first()
        if existing is None:
            raise
        return existing, False
    return run, True


@dataclass(frozen=True)
class LeaseGrant:
    run: Run
    epoch: int
    expires_at: datetime
    journal: list[Step]
    recovered: bool


def _recover_open_intents(run: Run, *, actor: str, now: datetime) -> list[Step]:
    """The recovery rules (docs/api.md) for every intent without an outcome. Returns the unknown steps.

    A write the ledger does not enforce is first put to its tool's lookup, if it declares one
    (tools.lookups, at most 2 s, asked while the caller holds the run's lock).
    """
    unknown: list[Step] = []
    lookup = None
    for step in Step.objects.filter(run=run, state=StepState.INTENT).order_by("index"):
        payload: dict[str, Any] = {
            "index": step.index,
            "name": step.name,
            "idempotency_key": step.idempotency_key,
        }
        if step.executions == 0:
            # approved while no worker waited for it: never handed out, so it never ran
            step_move(step, StepState.INTERRUPTED)
            event_type = EventType.STEP_INTERRUPTED
            payload["why"] = "approved; no worker had taken it yet"
        elif (
            step.effect == Effect.WRITE
            and step.enforced_by in (EnforcedBy.TOOL, EnforcedBy.NOBODY)
            and (answer := tool_lookup(step.name, step.idempotency_key)) is not None
        ):
            # the tool can say whether the key took effect (tools.lookups): its answer settles
            # the step and stays in the chain as evidence; "no answer" changes nothing
            payload["lookup"] = answer.evidence()
            if answer.state == "completed":
                step_move(step, StepState.DONE)
                step.result = {"settled_by_lookup": "completed"}
                step.outcome_at = now
                payload["key_state"] = "completed"
                event_type = EventType.RECONCILED
            elif answer.state == "absent" or step.enforced_by == EnforcedBy.TOOL:
                # absent: it never ran; the tool's own key makes a re-execution safe anyway
                step_move(step, StepState.INTERRUPTED)
                event_type = EventType.STEP_INTERRUPTED
            else:
                step_move(step, StepState.UNKNOWN)
                event_type = EventType.STEP_UNKNOWN
                payload["why"] = (
                    "the tool cannot tell whether it ran (enforced_by: nobody) "
                    "and its lookup gave no answer"
                )
        elif step.effect == Effect.READ or step.enforced_by == EnforcedBy.TOOL:
            step_move(step, StepState.INTERRUPTED)
            event_type = EventType.STEP_INTERRUPTED
        elif step.enforced_by == EnforcedBy.NOBODY:
            step_move(step, StepState.UNKNOWN)
            event_type = EventType.STEP_UNKNOWN
            payload["why"] = "the tool cannot tell whether it ran (enforced_by: nobody)"
        else:
            lookup = lookup or key_state_lookup()
            key_state = lookup(step.idempotency_key)
            payload["key_state"] = key_state.state
            if key_state.state == "completed":
                step_move(step, StepState.DONE)
                step.result = key_state.response
                step.outcome_at = now
                event_type = EventType.RECONCILED
            elif key_state.state == "failed":
                step_move(step, StepState.ERROR)
                step.result = key_state.response
                step.outcome_at = now
                event_type = EventType.RECONCILED
            elif key_state.state == "absent" or not key_state.stale:
                # absent: it never ran; fresh in_progress: a re-execution with the same key waits
                # on the tool side's lock instead of running twice
                step_move(step, StepState.INTERRUPTED)
                event_type = EventType.STEP_INTERRUPTED
            else:
                step_move(step, StepState.UNKNOWN)
                event_type = EventType.STEP_UNKNOWN
                payload["why"] = "the key is in progress with a stale lock: it may have been sent"
        if event_type == EventType.RECONCILED:
            payload["result_hash"] = arguments_hash(step.result)  # binds the copied result
        step.save()
        event_append(run, type=event_type, payload=payload, actor=actor, at=now)
        if step.state == StepState.UNKNOWN:
            unknown.append(step)
    return unknown


def _needs_review(
    run: Run,
    *,
    reason: str,
    actor: str,
    now: datetime,
    details: dict[str, Any],
    fence: bool = False,
) -> None:
    """`fence`: a lease whose recovery ends here still moves the epoch, so the worker that lost
    the lease cannot write (or heartbeat) while a person reviews."""
    run_move(run, RunStatus.NEEDS_REVIEW, reason=reason)
    run.lease_worker = None
    run.lease_expires_at = None
    if fence:
        run.epoch += 1
        details = {**details, "epoch": run.epoch}
    event_append(
        run, type=EventType.NEEDS_REVIEW, payload={"reason": reason, **details}, actor=actor, at=now
    )


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
        status_refusal = _refusal_for_status(run)
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
            limit = _exceeded_limit(run, now=now, next_step=False)
            if limit is not None:
                _budget_exceed(run, limit, actor=actor, now=now)
                t.refuse(
                    ApplicationError(
                        "budget_exceeded",
                        f"The run's {limit['limit']} budget is spent.",
                        details=limit,
                    )
                )
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


# The two hot calls are the journal kernel's statements themselves (runs/kernel.py), rules and
# all: the service layer adds nothing between them and the caller.
step_intent_record = kernel.step_intent
step_outcome_record = kernel.step_outcome


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
            refusal = _refusal_for_status(run) or ApplicationError(
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


# --- background enforcement -----------------------------------------------------------------


def _awaits_approval(run_id: UUID | str) -> bool:
    return Step.objects.filter(run_id=run_id, state=StepState.AWAITING_APPROVAL).exists()


def run_lease_expire(*, run_id: UUID | str, actor: str = "system:reaper") -> Run | None:
    """The reaper's work for one run: recovery rules, a new epoch that fences the lost worker."""
    with transaction.atomic():
        run = Run.objects.select_for_update(skip_locked=True).filter(pk=run_id).first()
        now = clock.now()
        if (
            run is None
            or run.status != RunStatus.RUNNING
            or run.lease_expires_at is None
            or run.lease_expires_at > now
        ):
            return None
        lost_worker = run.lease_worker
        unknown = _recover_open_intents(run, actor=actor, now=now)
        run.epoch += 1
        event_append(
            run,
            type=EventType.LEASE_EXPIRED,
            payload={"worker": lost_worker, "at_step": run.step_count, "epoch": run.epoch},
            actor=actor,
            at=now,
        )
        if unknown:
            _needs_review(
                run,
                reason=StatusReason.UNKNOWN_STEP,
                actor=actor,
                now=now,
                details={"steps": [s.index for s in unknown]},
            )
        else:
            run_move(run, RunStatus.INTERRUPTED, reason=StatusReason.LEASE_EXPIRED)
            run.lease_worker = None
            run.lease_expires_at = None
        run.save()
        if run.status == RunStatus.INTERRUPTED and not _awaits_approval(run.pk):
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


def _offer_on_commit(run: Run, *, reason: str) -> None:
    """Offer a resumable run to the Celery workers once this transaction commits: only runs whose
    runner is `celery`; an external run is resumed by its own process, never taken over."""
    if run.runner != RunRunner.CELERY:
        return
    transaction.on_commit(
        lambda: run_resumable.send(sender=Run, run_id=run.pk, agent=run.agent, reason=reason)
    )


def run_deadline_enforce(*, run_id: UUID | str, actor: str = "system:deadlines") -> Run | None:
    with transaction.atomic():
        run = Run.objects.select_for_update(skip_locked=True).filter(pk=run_id).first()
        now = clock.now()
        if run is None or run.status not in (
            RunStatus.PENDING,
            RunStatus.RUNNING,
            RunStatus.INTERRUPTED,
        ):
            return None
        if now < run.deadline:
            return None
        limit = {
            "limit": "wall_seconds",
            "limit_value": run.limit_wall_seconds,
            "deadline": run.deadline.isoformat(),
        }
        run.lease_worker = None
        run.lease_expires_at = None
        _budget_exceed(run, limit, actor=actor, now=now)
        return run


def runs_enforce_deadlines(*, limit: int = 500) -> int:
    now = clock.now()
    ids = list(
        Run.objects.filter(
            status__in=[RunStatus.PENDING, RunStatus.RUNNING, RunStatus.INTERRUPTED],
            deadline__lte=now,
        ).values_list("pk", flat=True)[:limit]
    )
    return sum(1 for run_id in ids if run_deadline_enforce(run_id=run_id) is not None)


# --- human decisions ------------------------------------------------------------------------


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


def run_limits_raise(*, run_id: UUID | str, by: str, note: str, limits: dict[str, Any]) -> Run:
    """An admin raises one run's limits (never lowers them), audited in its chain.

    A run stopped by a limit that now has room again resumes.
    """
    note_required(note)
    fields = {name: f"limit_{name}" for name in BUDGET_LIMITS}
    with transition(run_id, actor=f"user:{by}") as t:
        run = t.run
        if run.status in FINAL_STATUSES:
            raise ApplicationError("run_finished", f"The run is {run.status}.")
        changes: dict[str, Any] = {}
        errors: dict[str, list[str]] = {}
        for name, value in limits.items():
            if name not in fields or value is None:
                continue
            current = getattr(run, fields[name])
            new = Decimal(str(value)) if name == "cost_usd" else int(value)
            if current is not None and new < current:
                errors[name] = [
                    f"Limits are only raised here: {new} is below the current {current}."
                ]
            elif new != current:
                changes[name] = {"from": None if current is None else str(current), "to": str(new)}
                setattr(run, fields[name], new)
        if errors:
            raise ApplicationError(
                "validation_error", "Limits can only be raised.", status_code=400, details=errors
            )
        if not changes:
            raise ApplicationError(
                "validation_error",
                "Nothing to change.",
                status_code=400,
                details={"limits": ["No limit was raised."]},
            )
        now = clock.now()
        if "wall_seconds" in changes:
            run.deadline = run.created_at + timedelta(seconds=run.limit_wall_seconds)
        event_append(
            run,
            type=EventType.LIMITS_RAISED,
            payload={"changes": changes, "note": note.strip(), "by": by},
            actor=f"user:{by}",
            at=now,
        )
        still = _exceeded_limit(run, now=now, next_step=True)
        if run.status == RunStatus.BUDGET_EXCEEDED and still is not None:
            # another limit still stops it: the status reason names that one, not the old one
            run.status_reason = still["limit"]
        if (run.status == RunStatus.BUDGET_EXCEEDED and still is None) or (
            run.status == RunStatus.NEEDS_REVIEW
            and run.status_reason == StatusReason.RECOVERIES
            and run.used_recoveries <= run.limit_recoveries
        ):
            _resume_after_review(run, actor=f"user:{by}", now=now, why=StatusReason.LIMITS_RAISED)
        return run


# --- run actions (the operator's console) -----------------------------------------------------


def run_cancel(*, run_id: UUID | str, by: str, note: str) -> Run:
    """An admin stops a run that is not final: it becomes `cancelled` (final).

    The epoch moves, so nothing that carries the old one (a gateway call's `Ledger-Epoch`, a
    heartbeat) passes as current; the worker holding the lease is still refused its next write
    with `run_finished` (the kernel answers so to the epoch the run was cancelled under): it
    learns the run is over, not that someone took it over. The gateway runs no key of a cancelled run. An
    outcome for an intent already in flight under the old epoch is still recorded (the effect
    happened; the journal says so). Unknown steps stay in the review queue: whether an email
    went out is still a question after the run is cancelled.
    """
    note = note_required(note)
    with transition(run_id, actor=f"user:{by}") as t:
        run = t.run
        if run.status in FINAL_STATUSES:
            raise ApplicationError(
                "run_finished",
                f"The run is already {run.status}; only a run that is not finished can be cancelled.",
                details={"status": run.status},
            )
        now = clock.now()
        previous = run.status
        worker = run.lease_worker
        run_move(run, RunStatus.CANCELLED, reason=StatusReason.CANCELLED)
        run.epoch += 1
        event_append(
            run,
            type=EventType.RUN_CANCELLED,
            payload={
                "by": by,
                "note": note,
                "previous_status": previous,
                "worker": worker,
                "epoch": run.epoch,
            },
            actor=f"user:{by}",
            at=now,
        )
        return run


def run_legal_hold(*, run_id: UUID | str, on: bool, by: str, note: str) -> Run:
    """Put a run on legal hold (`on`) or lift it, with who, when and why, and its event.

    Retention never purges a run on hold, nor drops it with its month (audit.retention): its
    rows are moved aside instead. Any run may be held, finished or not; its status, lease and
    epoch do not change, so a worker holding it goes on. The run's row lock orders this against
    retention: a run retention holds is gone when the hold commits (not_found), and a run being
    held is skipped by retention (kept). Refused with `legal_hold_unchanged` when the run is
    already in the state asked for (the message says since when and by whom).
    """
    note = note_required(note)
    with transition(run_id, actor=f"user:{by}") as t:
        run = t.run
        if run.legal_hold == on:
            raise ApplicationError(
                "legal_hold_unchanged",
                _legal_hold_text(run) if on else "The run is not on legal hold.",
                details={"legal_hold": run.legal_hold, "by": run.legal_hold_by},
            )
        run.legal_hold = on
        run.legal_hold_at = t.now if on else None
        run.legal_hold_by = by if on else ""
        run.legal_hold_note = note if on else ""
        t.event(
            EventType.RUN_LEGAL_HOLD_SET if on else EventType.RUN_LEGAL_HOLD_LIFTED,
            {"by": by, "note": note},
        )
        return run


def _legal_hold_text(run: Run) -> str:
    """ "The run is already on legal hold since … (by …)." (a hold set in the database directly
    has no time or name)."""
    since = f" since {run.legal_hold_at:%Y-%m-%d %H:%M} UTC" if run.legal_hold_at else ""
    by = f" (by {run.legal_hold_by})" if run.legal_hold_by else ""
    return f"The run is already on legal hold{since}{by}."


COPYABLE_STEP_STATES = frozenset({StepState.DONE, StepState.ERROR})


def run_fork(
    *,
    run_id: UUID | str,
    index: int,
    by: str,
    note: str,
    writes: Mapping[str, str] | None = None,
) -> Run:
    """A new run whose journal is the original's first `index` steps: "what if it had gone on".

    The original's writes from `index` on (runs.selectors.fork_writes_after) were made once
    already; the fork's own steps get new keys, so going on would make them again. `writes`
    must name a ForkWrite for each such tool, or the fork is refused (`fork_writes_unchosen`,
    with the tools): `hold` fences the tool in the fork (a ForkFence the kernel reads,
    runs/sql/0018_fork_fences.sql: each write of it waits on the desk), `again` lets it run.
    The choices are in the fork's `run_created` event.

    The copies keep their results and idempotency keys, so a worker on the fork replays them
    from the journal and the tool side answers their keys from its store: no write runs twice.
    Each copy is bound by a `step_copied` event in the fork's chain (runs.binding); the fork's
    `run_created` names its origin and the original gets a `run_forked` event naming the fork.
    The fork starts `pending` with the original's limits, the copied steps' usage already spent
    (budgets belong to the run: a fork cannot buy a second budget) and a fresh deadline.
    Only steps with a recorded outcome (done or error) can be copied.
    """
    note = note_required(note)
    with transition(run_id, actor=f"user:{by}") as t:
        original = t.run
        if not 0 <= index <= original.step_count:
            raise ApplicationError(
                "validation_error",
                f"A fork copies 0 to {original.step_count} steps of this run, not {index}.",
                status_code=400,
                details={"index": [f"Between 0 and {original.step_count}."]},
            )
        steps = list(Step.objects.filter(run=original, index__lt=index).order_by("index"))
        for step in steps:
            if step.state not in COPYABLE_STEP_STATES:
                raise ApplicationError(
                    "fork_step_open",
                    f"Step {step.index} is {step.state}: a fork copies only steps with a "
                    "recorded outcome; fork from an earlier step or resolve it first.",
                    details={"index": step.index, "state": step.state},
                )
        choices = _fork_write_choices(run_id=original.pk, index=index, writes=writes or {})
        now = clock.now()
        fork = Run(
            agent=original.agent,
            external_id=None,
            input=original.input,
            policy=original.policy,
            **limits_copied(original, "limit_"),
            used_steps=len(steps),
            used_tokens=sum(s.usage_input_tokens + s.usage_output_tokens for s in steps),
            used_cost_usd=sum((s.usage_cost_usd for s in steps), Decimal(0)),
            step_count=len(steps),
            deadline=now + timedelta(seconds=original.limit_wall_seconds),
            event_head=GENESIS_HASH,
            forked_from=original,
            forked_from_index=index,
        )
        fork.save(force_insert=True)
        actor = f"user:{by}"
        event_append(
            fork,
            type=EventType.RUN_CREATED,
            payload={
                "agent": fork.agent,
                "external_id": None,
                "policy": original.policy.name if original.policy else None,
                "limits": budget_of(fork)["limits"],
                "forked_from": {"run_id": str(original.pk), "index": index},
                "by": by,
                "note": note,
                **({"writes_after_fork": choices} if choices else {}),
            },
            actor=actor,
            at=now,
        )
        held = [name for name, choice in choices.items() if choice == ForkWrite.HOLD]
        if held:
            fork_fence_rule()
            ForkFence.objects.bulk_create(
                ForkFence(run=fork, tool=name, created_by=by) for name in held
            )
        copies = [_step_copy(fork, step) for step in steps]
        Step.objects.bulk_create(copies)
        for copy in copies:
            event_append(
                fork, type=EventType.STEP_COPIED, payload=_copied_payload(copy), actor=actor, at=now
            )
        fork.save()
        event_append(
            original,
            type=EventType.RUN_FORKED,
            payload={"fork_run_id": str(fork.pk), "index": index, "by": by, "note": note},
            actor=actor,
            at=now,
        )
        transaction.on_commit(
            lambda: run_resumable.send(
                sender=Run, run_id=fork.pk, agent=fork.agent, reason="forked"
            )
        )
        return fork


def fork_fence_rule() -> ApprovalRule:
    """The one approval rule a fork's held write waits under (never active by itself: the
    kernel names it only for a write a ForkFence holds), made when first needed."""
    rule, _ = ApprovalRule.objects.get_or_create(
        is_fork_fence=True,
        defaults={
            "agent": "",
            "tool_pattern": "(a fork's fence)",
            "approvals_required": 1,
            "active": False,
            "created_by": "system",
        },
    )
    return rule


def _fork_write_choices(
    *, run_id: UUID | str, index: int, writes: Mapping[str, str]
) -> dict[str, str]:
    """The choice for each tool the original wrote with from `index` on; refused unless every
    such tool has one (and only those)."""
    from runs.selectors import fork_writes_after

    made = fork_writes_after(run_id=run_id, index=index)
    names = {w.name for w in made}
    bad = {n: c for n, c in writes.items() if n not in names or c not in ForkWrite.values}
    if bad:
        raise invalid(
            "writes",
            "Choose hold or again, only for the tools the original wrote with after the fork "
            "point.",
            f"Not a choice here: {', '.join(sorted(bad))}.",
        )
    missing = [w for w in made if w.name not in writes]
    if missing:
        said = "; ".join(
            f"{w.name} (step{'s' if len(w.steps) > 1 else ''} "
            + ", ".join(f"{i} {state}" for i, state in w.steps)
            + ")"
            for w in missing
        )
        raise ApplicationError(
            "fork_writes_unchosen",
            f"The original already wrote from step {index} on: {said}. A fork that goes on "
            "would write again under new keys: choose, per tool, to hold its writes for a "
            "person's approval or to run them again.",
            details={"tools": {w.name: [i for i, _ in w.steps] for w in missing}},
        )
    return {name: writes[name] for name in sorted(names)}


# What a fork's copy of a step keeps of the original: all it recorded (its key and result too)
COPIED_STEP_FIELDS = (
    "index",
    "kind",
    "name",
    "effect",
    "enforced_by",
    "arguments",
    "arguments_hash",
    "idempotency_key",
    "state",
    "result",
    "usage_input_tokens",
    "usage_output_tokens",
    "usage_cost_usd",
    "intent_at",
    "outcome_at",
    "resolution_action",
    "resolution_by",
    "resolution_note",
    "resolution_at",
)


def _step_copy(fork: Run, step: Step) -> Step:
    """The original's step as the fork's: same key and result, never executed in the fork."""
    copied = {name: getattr(step, name) for name in COPIED_STEP_FIELDS}
    return Step(run=fork, journal_month=fork.journal_month, epoch=0, executions=0, **copied)


def _copied_payload(step: Step) -> dict[str, Any]:
    """Binds every field of a copied step, as step_intent + step_done (+ step_resolved) would:
    the step as the API shows it (the shape runs.binding compares), with its arguments and
    result by their hashes and without the epoch and times the fork gives it."""
    from runs.representations import step_json  # which reads runs.services

    shown = step_json(step)
    for own in ("arguments", "result", "epoch", "intent_at", "outcome_at"):
        del shown[own]
    return {**shown, "result_hash": arguments_hash(step.result)}


# --- approvals --------------------------------------------------------------------------------


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
    transaction.on_commit(
        lambda: run_resumable.send(sender=Run, run_id=run.pk, agent=run.agent, reason=why)
    )


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
    next intent call for that index takes it (runs/sql/0007_approvals.sql). Refused, with who
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


def step_outcome_from_gateway(
    *, run_id: UUID | str, index: int, epoch: int, ok: bool, result: Any, actor: str
) -> kernel.StepAnswer | kernel.BudgetStopped | None:
    """The gateway records a step's outcome when it completes (or fails) the step's key.

    Runs inside the transaction that finishes the key, so the tool's rows, the key's response,
    the step's outcome and its `step_done` / `step_error` event commit together. A refusal (the
    run moved to another epoch, the step is no longer an open intent) records nothing and is
    not an error: the effect happened under the key, and whoever holds the step now gets the
    key's stored response and its outcome from the next invoke (or recovery reconciles it).
    Returns the journal's answer, the budget stop it recorded (the caller raises it once the
    key's transaction has committed), or None when it refused.
    """
    try:
        return kernel.step_outcome(
            run_id=run_id,
            index=index,
            epoch=epoch,
            status="ok" if ok else "error",
            result=result,
            usage=None,
            actor=actor,
        )
    except kernel.BudgetStopped as stop:
        return stop
    except ApplicationError as refusal:
        logger.info(
            "gateway outcome of %s step %s not recorded: %s %s",
            run_id,
            index,
            refusal.code,
            refusal.details,
        )
        return None
