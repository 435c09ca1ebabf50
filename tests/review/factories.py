"""Build dashboard test data through the journal's real services (no hand-made rows)."""

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from dashboard.roles import GROUP_PERMISSIONS, groups_ensure_now
from runs import clock
from runs.constants import RunStatus, StepState
from runs.models import Run, Step
from runs.services.creation import run_create
from runs.services.enforcement import run_lease_expire
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record, step_outcome_record
from teams.models import default_team
from teams.services import GROUP_ROLE, roles_of, roles_set_in

PASSWORD = "correct-horse-battery-9"


def groups_ready() -> None:
    """The dashboard's groups, which their migration made; a `transactional_db` test's flush
    takes them, and then they are made again (one query when they are there, ~20 when not)."""
    if Group.objects.filter(name__in=GROUP_PERMISSIONS).count() < len(GROUP_PERMISSIONS):
        groups_ensure_now()


def user_in(group: str | None, username: str | None = None, email: str = "") -> User:
    """A user in one dashboard group (or none), with a known password."""
    groups_ready()
    name = username or f"{group or 'nobody'}-user"
    user, _ = User.objects.get_or_create(username=name, defaults={"email": email})
    user.set_password(PASSWORD)
    user.email = email or user.email
    user.save()
    if group:
        # the people page's group, and the role in `default` it stands for (as sso.services
        # keeps them): the permissions come from the role (teams.backends)
        user.groups.add(Group.objects.get(name=group))
        roles_set_in(
            user, default_team(), {*roles_of(user).get(default_team().pk, ()), GROUP_ROLE[group]}
        )
    return user


@dataclass
class UnknownStep:
    run_id: str
    index: int
    ticket_step: int

    @property
    def run(self) -> Run:
        return Run.objects.get(pk=self.run_id)

    @property
    def step(self) -> Step:
        return Step.objects.get(run_id=self.run_id, index=self.index)


def _lost_lease(run_id: Any, ttl: int) -> None:
    """Let the lease run out by moving the journal's clock past it, then reap it."""
    real_now = clock.now
    later = real_now() + timedelta(seconds=ttl + 1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(clock, "now", lambda: later)
        run_lease_expire(run_id=run_id)


def killed_support_run(
    *,
    agent: str = "support",
    external_id: str | None = None,
    customer: str = "ada@example.com",
    runner: str = "external",
) -> UnknownStep:
    """The story: the support agent searched, created a ticket, then died while emailing.

    Steps: 0 model read, 1 tickets.create (write, done), 2 email.send (write, enforced_by
    nobody, intent only). The lease expires; recovery makes step 2 `unknown` and the run
    `needs_review`.
    """
    run, _ = run_create(
        agent=agent,
        input={"ticket": "refund please", "customer": customer},
        external_id=external_id,
        actor="worker:w-7",
        runner=runner,
    )
    grant = run_lease_acquire(run_id=run.pk, worker="w-7", ttl_seconds=5, actor="worker:w-7")
    epoch = grant.epoch
    step_intent_record(
        run_id=run.pk,
        epoch=epoch,
        index=0,
        kind="model",
        name="model.chat",
        effect="read",
        arguments={"prompt": "classify the ticket"},
        outcome={"status": "ok", "result": {"intent": "refund"}, "usage": {"input_tokens": 120}},
        actor="worker:w-7",
    )
    step_intent_record(
        run_id=run.pk,
        epoch=epoch,
        index=1,
        kind="tool",
        name="tickets.create",
        effect="write",
        enforced_by="tool",
        arguments={"customer": customer, "subject": "Refund", "body": "Customer asks a refund"},
        actor="worker:w-7",
    )
    step_outcome_record(
        run_id=run.pk,
        index=1,
        epoch=epoch,
        status="ok",
        result={"ticket": {"id": 41, "customer": customer, "subject": "Refund", "status": "open"}},
        usage={"input_tokens": 0, "output_tokens": 0},
        actor="worker:w-7",
    )
    step_intent_record(
        run_id=run.pk,
        epoch=epoch,
        index=2,
        kind="tool",
        name="email.send",
        effect="write",
        enforced_by="nobody",
        arguments={
            "to": customer,
            "subject": "Your refund",
            "body": "We refunded you.",
            "ticket_id": 41,
        },
        actor="worker:w-7",
    )
    _lost_lease(run.pk, 5)
    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_REVIEW, run.status
    assert Step.objects.get(run=run, index=2).state == StepState.UNKNOWN
    return UnknownStep(run_id=str(run.pk), index=2, ticket_step=1)


def finish_run_as_worker(run_id: Any, *, worker: str = "w-9") -> Run:
    """What a worker does after a resolution: lease, do the remaining step, complete."""
    from runs.services.finish import run_complete

    grant = run_lease_acquire(
        run_id=run_id, worker=worker, ttl_seconds=30, actor=f"worker:{worker}"
    )
    index = grant.run.step_count
    for step in grant.journal:
        if step.state == StepState.INTERRUPTED:
            step_intent_record(
                run_id=run_id,
                epoch=grant.epoch,
                index=step.index,
                kind=step.kind,
                name=step.name,
                effect=step.effect,
                enforced_by=step.enforced_by,
                arguments=step.arguments,
                actor=f"worker:{worker}",
            )
            step_outcome_record(
                run_id=run_id,
                index=step.index,
                epoch=grant.epoch,
                status="ok",
                result={"email": {"id": 7, "message_id": "<retry@ledger>"}},
                usage={"input_tokens": 0, "output_tokens": 0},
                actor=f"worker:{worker}",
            )
    step_intent_record(
        run_id=run_id,
        epoch=grant.epoch,
        index=index,
        kind="tool",
        name="tickets.close",
        effect="write",
        enforced_by="tool",
        arguments={"ticket_id": 41, "resolution": "refunded"},
        actor=f"worker:{worker}",
    )
    step_outcome_record(
        run_id=run_id,
        index=index,
        epoch=grant.epoch,
        status="ok",
        result={"ticket": {"id": 41, "status": "closed"}},
        usage={"input_tokens": 0, "output_tokens": 0},
        actor=f"worker:{worker}",
    )
    return run_complete(
        run_id=run_id, epoch=grant.epoch, output={"ok": True}, actor=f"worker:{worker}"
    )


def crash_looped_run(*, agent: str = "looper") -> Run:
    """A run whose recovery budget is spent: in review with no unknown step."""
    from runs.api_errors import ApplicationError
    from runs.models import BudgetPolicy

    BudgetPolicy.objects.get_or_create(
        agent=agent,
        defaults={
            "name": f"{agent}-policy",
            "max_steps": 20,
            "max_tokens": 10_000,
            "max_wall_seconds": 3600,
            "max_recoveries": 0,
        },
    )
    run, _ = run_create(agent=agent, input={}, actor="worker:w-1")
    run_lease_acquire(run_id=run.pk, worker="w-1", ttl_seconds=5, actor="worker:w-1")
    _lost_lease(run.pk, 5)
    with pytest.raises(ApplicationError):
        run_lease_acquire(run_id=run.pk, worker="w-2", ttl_seconds=5, actor="worker:w-2")
    run.refresh_from_db()
    assert (run.status, run.status_reason) == (RunStatus.NEEDS_REVIEW, "recoveries")
    return run


@dataclass
class WaitingStep:
    run_id: str
    index: int
    epoch: int

    @property
    def run(self) -> Run:
        return Run.objects.get(pk=self.run_id)

    @property
    def step(self) -> Step:
        return Step.objects.get(run_id=self.run_id, index=self.index)


def run_awaiting_approval(
    *,
    agent: str = "support",
    customer: str = "ada@example.com",
    approvals: int = 1,
    expires_after_seconds: int | None = None,
    worker: str = "w-7",
    ttl_seconds: int = 30,
) -> WaitingStep:
    """The support agent created a ticket and now wants to email the customer; a rule for
    `email.*` holds step 1 until people approve it. The worker keeps its lease."""
    from runs.models import ApprovalRule

    ApprovalRule.objects.get_or_create(
        agent=agent,
        tool_pattern="email.*",
        defaults={
            "approvals_required": approvals,
            "expires_after_seconds": expires_after_seconds,
        },
    )
    run, _ = run_create(
        agent=agent,
        input={"ticket": "refund please", "customer": customer},
        actor=f"worker:{worker}",
    )
    grant = run_lease_acquire(
        run_id=run.pk, worker=worker, ttl_seconds=ttl_seconds, actor=f"worker:{worker}"
    )
    step_intent_record(
        run_id=run.pk,
        epoch=grant.epoch,
        index=0,
        kind="tool",
        name="tickets.create",
        effect="write",
        enforced_by="tool",
        arguments={"customer": customer, "subject": "Refund", "body": "Customer asks a refund"},
        actor=f"worker:{worker}",
    )
    step_outcome_record(
        run_id=run.pk,
        index=0,
        epoch=grant.epoch,
        status="ok",
        result={"ticket": {"id": 41, "customer": customer, "subject": "Refund", "status": "open"}},
        usage={"input_tokens": 0, "output_tokens": 0},
        actor=f"worker:{worker}",
    )
    answer = step_intent_record(
        run_id=run.pk,
        epoch=grant.epoch,
        index=1,
        kind="tool",
        name="email.send",
        effect="write",
        enforced_by="nobody",
        arguments={"to": customer, "subject": "Your refund", "body": "Refunded.", "ticket_id": 41},
        actor=f"worker:{worker}",
    )
    assert answer.step.state == StepState.AWAITING_APPROVAL
    return WaitingStep(run_id=str(run.pk), index=1, epoch=grant.epoch)
