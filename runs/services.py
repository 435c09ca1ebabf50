"""Every state change of a run or step, each in one transaction with its Event row.

The caller of a private `_` helper holds the run's row lock (SELECT ... FOR UPDATE); the public
services take it themselves through `lock_objects.run_for_update`.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from runs import clock, kernel
from runs.api_errors import ApplicationError
from runs.canonical import GENESIS_HASH, arguments_hash, event_hash
from runs.constants import (
    FINAL_STATUSES,
    RUN_TRANSITIONS,
    STEP_TRANSITIONS,
    Effect,
    EnforcedBy,
    Resolution,
    RunRunner,
    RunStatus,
    StepState,
)
from runs.lock_objects import run_for_update
from runs.models import BudgetPolicy, Event, Run, Step
from runs.recovery import key_state_lookup
from runs.signals import run_resumable

logger = logging.getLogger(__name__)


class InvalidTransition(Exception):
    """A transition outside the tables in runs.constants: a bug, never a client error."""


# --- the chain and the state machines -------------------------------------------------------


def event_body(
    *, run_id: UUID | str, seq: int, type: str, payload: Any, actor: str, at: datetime
) -> dict:
    """What an event's hash covers; `verify_journal` and offline verifiers rebuild exactly this."""
    return {
        "run": str(run_id),
        "seq": seq,
        "type": type,
        "payload": payload,
        "actor": actor,
        "at": at.isoformat(),
    }


def _event_append(
    run: Run, *, type: str, payload: dict[str, Any], actor: str, at: datetime
) -> Event:
    """Append to the run's chain. The caller holds the run lock and saves the run afterwards."""
    seq = run.event_seq + 1
    prev = run.event_head or GENESIS_HASH
    body = event_body(run_id=run.pk, seq=seq, type=type, payload=payload, actor=actor, at=at)
    digest = event_hash(prev_hash=prev, body=body)
    event = Event.objects.create(
        run=run,
        seq=seq,
        type=type,
        payload=payload,
        actor=actor,
        at=at,
        prev_hash=prev,
        hash=digest,
    )
    run.event_seq = seq
    run.event_head = digest
    return event


def _run_move(run: Run, to: str, *, reason: str = "") -> None:
    if to not in RUN_TRANSITIONS[run.status]:
        raise InvalidTransition(f"run {run.status} -> {to}")
    run.status = to
    run.status_reason = reason
    if to in FINAL_STATUSES:
        run.finished_at = clock.now()
        run.lease_worker = None
        run.lease_expires_at = None


def _step_move(step: Step, to: str) -> None:
    if to not in STEP_TRANSITIONS[step.state]:
        raise InvalidTransition(f"step {step.state} -> {to}")
    step.state = to


def money(value: Decimal) -> str:
    """US dollars as the API shows them: a string with six decimals."""
    return f"{value:.6f}"


# --- budgets --------------------------------------------------------------------------------


def budget_policy_for(agent: str) -> BudgetPolicy | None:
    policies = {
        (p.agent, p.is_default): p
        for p in BudgetPolicy.objects.filter(agent=agent)
        | BudgetPolicy.objects.filter(is_default=True)
    }
    return policies.get((agent, False)) or policies.get((None, True))


def budget_of(run: Run) -> dict[str, Any]:
    return {
        "limits": {
            "steps": run.limit_steps,
            "tokens": run.limit_tokens,
            "cost_usd": None if run.limit_cost_usd is None else money(run.limit_cost_usd),
            "wall_seconds": run.limit_wall_seconds,
            "recoveries": run.limit_recoveries,
        },
        "used": {
            "steps": run.used_steps,
            "tokens": run.used_tokens,
            "cost_usd": money(run.used_cost_usd),
            "recoveries": run.used_recoveries,
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
    _run_move(run, RunStatus.BUDGET_EXCEEDED, reason=limit["limit"])
    _event_append(run, type="budget_exceeded", payload=limit, actor=actor, at=now)
    run.save()


def _refusal_for_status(run: Run) -> ApplicationError | None:
    if run.status == RunStatus.NEEDS_REVIEW:
        return ApplicationError(
            "needs_review",
            "The run waits for a supervisor's review.",
            details={"reason": run.status_reason},
        )
    if run.status == RunStatus.BUDGET_EXCEEDED:
        return ApplicationError(
            "budget_exceeded",
            f"The run's {run.status_reason} budget is spent.",
            details={"limit": run.status_reason},
        )
    if run.status in FINAL_STATUSES:
        return ApplicationError(
            "run_finished", f"The run is {run.status}.", details={"status": run.status}
        )
    return None


def _check_epoch(run: Run, epoch: int) -> None:
    if epoch != run.epoch:
        raise ApplicationError(
            "stale_epoch",
            "Another worker holds the run now; stop and write nothing more.",
            details={"epoch": epoch, "current_epoch": run.epoch},
        )


# --- runs -----------------------------------------------------------------------------------


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
    limits: dict[str, Any] = (
        {
            "max_steps": policy.max_steps,
            "max_tokens": policy.max_tokens,
            "max_wall_seconds": policy.max_wall_seconds,
            "max_cost_usd": policy.max_cost_usd,
            "max_recoveries": policy.max_recoveries,
        }
        if policy
        else settings.LEDGER_FALLBACK_LIMITS
    )
    now = clock.now()
    try:
        with transaction.atomic():
            run = Run(
                agent=agent,
                external_id=external_id,
                input=input,
                runner=runner,
                policy=policy,
                limit_steps=limits["max_steps"],
                limit_tokens=limits["max_tokens"],
                limit_cost_usd=limits["max_cost_usd"],
                limit_wall_seconds=limits["max_wall_seconds"],
                limit_recoveries=limits["max_recoveries"],
                deadline=now + timedelta(seconds=limits["max_wall_seconds"]),
                event_head=GENESIS_HASH,
            )
            run.save(force_insert=True)
            _event_append(
                run,
                type="run_created",
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
    """DESIGN.md's recovery rules for every intent without an outcome. Returns the unknown steps."""
    unknown: list[Step] = []
    lookup = None
    for step in Step.objects.filter(run=run, state=StepState.INTENT).order_by("index"):
        payload: dict[str, Any] = {
            "index": step.index,
            "name": step.name,
            "idempotency_key": step.idempotency_key,
        }
        if step.effect == Effect.READ or step.enforced_by == EnforcedBy.TOOL:
            _step_move(step, StepState.INTERRUPTED)
            event_type = "step_interrupted"
        elif step.enforced_by == EnforcedBy.NOBODY:
            _step_move(step, StepState.UNKNOWN)
            event_type = "step_unknown"
            payload["why"] = "the tool cannot tell whether it ran (enforced_by: nobody)"
        else:
            lookup = lookup or key_state_lookup()
            key_state = lookup(step.idempotency_key)
            payload["key_state"] = key_state.state
            if key_state.state == "completed":
                _step_move(step, StepState.DONE)
                step.result = key_state.response
                step.outcome_at = now
                event_type = "reconciled"
            elif key_state.state == "failed":
                _step_move(step, StepState.ERROR)
                step.result = key_state.response
                step.outcome_at = now
                event_type = "reconciled"
            elif key_state.state == "absent" or not key_state.stale:
                # absent: it never ran; fresh in_progress: a re-execution with the same key waits
                # on the tool side's lock instead of running twice
                _step_move(step, StepState.INTERRUPTED)
                event_type = "step_interrupted"
            else:
                _step_move(step, StepState.UNKNOWN)
                event_type = "step_unknown"
                payload["why"] = "the key is in progress with a stale lock: it may have been sent"
        if event_type == "reconciled":
            payload["result_hash"] = arguments_hash(step.result)  # binds the copied result
        step.save()
        _event_append(run, type=event_type, payload=payload, actor=actor, at=now)
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
    _run_move(run, RunStatus.NEEDS_REVIEW, reason=reason)
    run.lease_worker = None
    run.lease_expires_at = None
    if fence:
        run.epoch += 1
        details = {**details, "epoch": run.epoch}
    _event_append(
        run, type="needs_review", payload={"reason": reason, **details}, actor=actor, at=now
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
    """The lease after an expired or interrupted holder: the recovery rules, then the grant."""
    refusal: ApplicationError | None = None
    with transaction.atomic():
        run = run_for_update(run_id)
        now = clock.now()
        refusal = _refusal_for_status(run)
        lease_live = run.lease_expires_at is not None and run.lease_expires_at > now
        if (
            refusal is None
            and run.status == RunStatus.RUNNING
            and run.lease_worker not in (None, worker)
            and lease_live
        ):
            raise ApplicationError(
                "lease_held",
                "Another worker holds the lease.",
                details={
                    "worker": run.lease_worker,
                    "expires_at": run.lease_expires_at.isoformat()
                    if run.lease_expires_at
                    else None,
                },
            )
        recovering = refusal is None and (
            run.status == RunStatus.INTERRUPTED
            or (run.status == RunStatus.RUNNING and run.lease_worker is not None)
        )
        if refusal is None and recovering:
            unknown = _recover_open_intents(run, actor=actor, now=now)
            if unknown:
                _needs_review(
                    run,
                    reason="unknown_step",
                    actor=actor,
                    now=now,
                    details={"steps": [s.index for s in unknown]},
                    fence=True,
                )
                run.save()
                refusal = _refusal_for_status(run)
            else:
                run.used_recoveries += 1
                if run.used_recoveries > run.limit_recoveries:
                    _needs_review(
                        run,
                        reason="recoveries",
                        actor=actor,
                        now=now,
                        details={
                            "limit": "recoveries",
                            "limit_value": run.limit_recoveries,
                            "used": run.used_recoveries,
                        },
                        fence=True,
                    )
                    run.save()
                    refusal = ApplicationError(
                        "needs_review",
                        "The run's recovery budget is spent; it waits for a supervisor.",
                        details={
                            "limit": "recoveries",
                            "limit_value": run.limit_recoveries,
                            "used": run.used_recoveries,
                        },
                    )
        if refusal is None:
            limit = _exceeded_limit(run, now=now, next_step=False)
            if limit is not None:
                _budget_exceed(run, limit, actor=actor, now=now)
                refusal = ApplicationError(
                    "budget_exceeded", f"The run's {limit['limit']} budget is spent.", details=limit
                )
        if refusal is None:
            previous = run.lease_worker
            _run_move(run, RunStatus.RUNNING, reason="")
            run.epoch += 1
            run.leases_granted += 1
            run.lease_worker = worker
            run.lease_expires_at = now + timedelta(seconds=ttl_seconds)
            run.lease_ttl_seconds = ttl_seconds
            _event_append(
                run,
                type="lease_acquired",
                payload={
                    "worker": worker,
                    "epoch": run.epoch,
                    "expires_at": run.lease_expires_at.isoformat(),
                    "recovery": recovering,
                    "previous_worker": previous,
                    "replayable_steps": run.step_count,
                },
                actor=actor,
                at=now,
            )
            run.save()
            journal = list(Step.objects.filter(run=run).order_by("index"))
            return LeaseGrant(
                run=run,
                epoch=run.epoch,
                expires_at=run.lease_expires_at,
                journal=journal,
                recovered=recovering,
            )
    assert refusal is not None
    raise refusal


def run_heartbeat(*, run_id: UUID | str, epoch: int) -> kernel.HeartbeatAnswer:
    """Extend the lease; no event (a heartbeat changes no state anyone reviews)."""
    return kernel.heartbeat(run_id=run_id, epoch=epoch)


@dataclass(frozen=True)
class IntentResult:
    step: Step
    created: bool
    budget_refusal: ApplicationError | None = None


def step_intent_record(
    *,
    run_id: UUID | str,
    epoch: int,
    index: int,
    kind: str,
    name: str,
    effect: str,
    arguments: Any,
    enforced_by: str | None = None,
    outcome: dict[str, Any] | None = None,
    actor: str,
) -> IntentResult:
    """Journal a step's intent before it runs (or, for a read step, intent and outcome at once).

    Index `step_count` is a new step and consumes one step of budget; a lower index is a replay
    (returned as recorded, consuming nothing) or the re-execution of an interrupted step. One
    statement of the journal kernel (runs/kernel.py).
    """
    if effect == Effect.WRITE and outcome is not None:
        raise ApplicationError(
            "validation_error",
            "A write step takes two calls: its intent before the tool runs, its outcome after.",
            status_code=400,
            details={"outcome": ["Not allowed on a write step."]},
        )
    answer = kernel.step_intent(
        run_id=run_id,
        epoch=epoch,
        index=index,
        kind=kind,
        name=name,
        effect=effect,
        arguments=arguments,
        enforced_by=enforced_by,
        outcome=outcome,
        actor=actor,
    )
    return IntentResult(
        step=answer.step, created=answer.created, budget_refusal=answer.budget_refusal
    )


@dataclass(frozen=True)
class OutcomeResult:
    step: Step
    run: Run
    budget_refusal: ApplicationError | None = None


def step_outcome_record(
    *,
    run_id: UUID | str,
    index: int,
    epoch: int,
    status: str,
    result: Any,
    usage: dict[str, Any] | None = None,
    actor: str,
) -> OutcomeResult:
    """Record what a step did. The same outcome twice is a no-op; a different one a conflict.

    Usage is a fact (the tokens were spent), so an outcome that crosses a limit is recorded and
    then the run moves to budget_exceeded; the caller answers 409 so the worker stops.
    """
    answer = kernel.step_outcome(
        run_id=run_id,
        index=index,
        epoch=epoch,
        status=status,
        result=result,
        usage=usage,
        actor=actor,
    )
    return OutcomeResult(step=answer.step, run=answer.run, budget_refusal=answer.budget_refusal)


def _run_finish(
    *, run_id: UUID | str, epoch: int, to: str, field: str, value: Any, actor: str
) -> Run:
    with transaction.atomic():
        run = run_for_update(run_id)
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
        setattr(run, field, value)
        _run_move(run, to)
        _event_append(run, type=f"run_{to}", payload={field: value}, actor=actor, at=now)
        run.save()
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
        _event_append(
            run,
            type="lease_expired",
            payload={"worker": lost_worker, "at_step": run.step_count, "epoch": run.epoch},
            actor=actor,
            at=now,
        )
        if unknown:
            _needs_review(
                run,
                reason="unknown_step",
                actor=actor,
                now=now,
                details={"steps": [s.index for s in unknown]},
            )
        else:
            _run_move(run, RunStatus.INTERRUPTED, reason="lease_expired")
            run.lease_worker = None
            run.lease_expires_at = None
        run.save()
        if run.status == RunStatus.INTERRUPTED:
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
    candidates = list(
        Run.objects.filter(nobody_on_it, updated_at__lt=cutoff, runner=RunRunner.CELERY)
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


def _resume_after_review(run: Run, *, actor: str, now: datetime, why: str) -> None:
    """needs_review → running without a lease; the next lease is not a recovery.

    The epoch moves on: whoever held the run before the decision is fenced off, so a retry the
    supervisor approved runs once, under the next lease.
    """
    _run_move(run, RunStatus.RUNNING, reason=why)
    run.lease_worker = None
    run.lease_expires_at = None
    run.epoch += 1
    _event_append(
        run, type="run_resumed", payload={"why": why, "epoch": run.epoch}, actor=actor, at=now
    )
    _offer_on_commit(run, reason=why)


def step_resolve(
    *, run_id: UUID | str, index: int, action: str, note: str, by: str, result: Any = None
) -> Step:
    """A supervisor's decision on an `unknown` step: sent, retry (same key) or abandon.

    A second resolution of the same step is refused with who already decided, and when.
    """
    if not note or not note.strip():
        raise ApplicationError(
            "validation_error",
            "A note is required.",
            status_code=400,
            details={"note": ["Required."]},
        )
    if action not in Resolution.values:
        raise ApplicationError(
            "validation_error",
            "Unknown action.",
            status_code=400,
            details={"action": [f"One of {Resolution.values}."]},
        )
    with transaction.atomic():
        run = run_for_update(run_id)
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
            _step_move(step, StepState.DONE)
            step.result = result if result is not None else {"resolved_as": "sent"}
            step.outcome_at = now
        elif action == Resolution.RETRY:
            _step_move(step, StepState.INTERRUPTED)
        else:
            _step_move(step, StepState.ABANDONED)
            step.outcome_at = now
        step.resolution_action = action
        step.resolution_by = by
        step.resolution_note = note.strip()
        step.resolution_at = now
        step.claimed_by = None
        step.claim_expires_at = None
        step.save()
        _event_append(
            run,
            type="step_resolved",
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
                _run_move(run, RunStatus.ABANDONED, reason="step_abandoned")
                _event_append(
                    run,
                    type="run_abandoned",
                    payload={"index": index, "note": step.resolution_note},
                    actor=f"user:{by}",
                    at=now,
                )
        elif (
            run.status == RunStatus.NEEDS_REVIEW
            and not Step.objects.filter(run=run, state=StepState.UNKNOWN).exists()
        ):
            _resume_after_review(run, actor=f"user:{by}", now=now, why="resolved")
        run.save()
        return step


def run_review_decide(*, run_id: UUID | str, action: str, note: str, by: str) -> Run:
    """A run in review with no unknown step (a crash loop): resume it, or abandon it."""
    if not note or not note.strip():
        raise ApplicationError(
            "validation_error",
            "A note is required.",
            status_code=400,
            details={"note": ["Required."]},
        )
    with transaction.atomic():
        run = run_for_update(run_id)
        if run.status != RunStatus.NEEDS_REVIEW:
            raise ApplicationError(
                "not_in_review", f"The run is {run.status}.", details={"status": run.status}
            )
        now = clock.now()
        if action == Resolution.ABANDON:
            _run_move(run, RunStatus.ABANDONED, reason="abandoned_in_review")
            _event_append(
                run,
                type="run_abandoned",
                payload={"note": note.strip()},
                actor=f"user:{by}",
                at=now,
            )
        elif action == "resume":
            if Step.objects.filter(run=run, state=StepState.UNKNOWN).exists():
                raise ApplicationError("unknown_steps", "Resolve the run's unknown steps first.")
            if run.used_recoveries >= run.limit_recoveries:
                run.limit_recoveries = run.used_recoveries + 1
            _resume_after_review(run, actor=f"user:{by}", now=now, why=f"resumed: {note.strip()}")
        else:
            raise ApplicationError(
                "validation_error",
                "Unknown action.",
                status_code=400,
                details={"action": ["resume or abandon"]},
            )
        run.save()
        return run


def run_limits_raise(*, run_id: UUID | str, by: str, note: str, limits: dict[str, Any]) -> Run:
    """An admin raises one run's limits (never lowers them), audited in its chain.

    A run stopped by a limit that now has room again resumes.
    """
    if not note or not note.strip():
        raise ApplicationError(
            "validation_error",
            "A note is required.",
            status_code=400,
            details={"note": ["Required."]},
        )
    fields = {
        "steps": "limit_steps",
        "tokens": "limit_tokens",
        "cost_usd": "limit_cost_usd",
        "wall_seconds": "limit_wall_seconds",
        "recoveries": "limit_recoveries",
    }
    with transaction.atomic():
        run = run_for_update(run_id)
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
        _event_append(
            run,
            type="limits_raised",
            payload={"changes": changes, "note": note.strip(), "by": by},
            actor=f"user:{by}",
            at=now,
        )
        if (
            run.status == RunStatus.BUDGET_EXCEEDED
            and _exceeded_limit(run, now=now, next_step=True) is None
        ) or (
            run.status == RunStatus.NEEDS_REVIEW
            and run.status_reason == "recoveries"
            and run.used_recoveries <= run.limit_recoveries
        ):
            _resume_after_review(run, actor=f"user:{by}", now=now, why="limits_raised")
        run.save()
        return run


def step_outcome_from_gateway(
    *, run_id: UUID | str, index: int, epoch: int, ok: bool, result: Any, actor: str
) -> kernel.StepAnswer | None:
    """The gateway records a step's outcome when it completes (or fails) the step's key.

    Runs inside the transaction that finishes the key, so the tool's rows, the key's response,
    the step's outcome and its `step_done` / `step_error` event commit together. A refusal (the
    run moved to another epoch, the step is no longer an open intent) records nothing and is
    not an error: the effect happened under the key, and whoever holds the step now gets the
    key's stored response and its outcome from the next invoke (or recovery reconciles it).
    Returns the journal's answer, or None when it refused.
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
    except ApplicationError as refusal:
        logger.info(
            "gateway outcome of %s step %s not recorded: %s %s",
            run_id,
            index,
            refusal.code,
            refusal.details,
        )
        return None
