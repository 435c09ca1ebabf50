"""A person's decision on a desk item (sent/retry/abandon, approve, deny, many at once) and the
tool's lookup settling an item by itself; each writes its audit entry in the same transaction.

Lock precondition: none held by the caller. The journal's services (`runs.services`) lock the
step row; these functions only open the transaction the audit entry joins. The claim check reads
without a lock: the journal refuses a second decision on a step already resolved.
"""

from collections.abc import Callable
from functools import partial
from typing import Any
from uuid import UUID

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from dashboard.audit import audit_record
from review.models import AuditEntry
from review.services.claims import step_target
from runs import clock
from runs.api_errors import ApplicationError
from runs.constants import EnforcedBy, Resolution, StepState
from runs.models import Step
from runs.services.approvals import approval_expire_if_due, step_approve, step_deny
from runs.services.decisions import resolution_validate, step_resolve
from tools.lookups import LookupAnswer, lookup_for, tool_lookup


def review_step_resolve(
    *,
    user: AbstractBaseUser,
    run_id: UUID | str,
    index: int,
    action: str,
    note: str,
    result: Any = None,
    confirmed_may_repeat: bool = False,
) -> Step:
    """Resolve an unknown step (sent/retry/abandon); refused while another person holds a claim.

    A retry of a step nobody enforces may make the effect happen twice (the tool cannot tell a
    repeat): it needs `confirmed_may_repeat`, and the audit entry records the confirmation.
    """
    resolution_validate(action=action, note=note, result=result)
    with transaction.atomic():
        step_now = (
            Step.objects.filter(run_id=run_id, index=index).only("enforced_by", "name").first()
        )
        risky = (
            action == Resolution.RETRY
            and step_now is not None
            and step_now.enforced_by == EnforcedBy.NOBODY
        )
        if risky and not confirmed_may_repeat:
            assert step_now is not None
            raise ApplicationError(
                "confirmation_required",
                f"Nobody enforces {step_now.name}'s idempotency: a retry may make its effect "
                "happen twice. Confirm that this is acceptable.",
                details={"confirm": ["Required for a retry of a step enforced by nobody."]},
            )
        claimed = (
            Step.objects.select_related("claimed_by")
            .filter(run_id=run_id, index=index)
            .exclude(claimed_by_id=user.pk)
            .first()
        )
        if (
            claimed is not None
            and claimed.state == StepState.UNKNOWN
            and claimed.claim_is_live(clock.now())
        ):
            assert claimed.claimed_by is not None and claimed.claim_expires_at is not None
            raise ApplicationError(
                "claimed",
                f"{claimed.claimed_by.get_username()} is working on this item "
                f"(claim until {claimed.claim_expires_at:%H:%M:%S} UTC).",
                details={"by": claimed.claimed_by.get_username()},
            )
        step = step_resolve(
            run_id=run_id,
            index=index,
            action=action,
            note=note,
            by=user.get_username(),
            result=result,
        )
        audit_record(
            actor=user,
            action=f"step.resolve.{action}",
            target=step_target(run_id, index),
            note=note,
            details={
                "run_id": str(run_id),
                "index": index,
                "action": action,
                "result": result,
                "step": step.name,
                "idempotency_key": step.idempotency_key,
                **({"confirmed_may_repeat": True} if risky else {}),
            },
        )
        return step


def _step_decided(
    decide: Callable[..., Step],
    action: str,
    *,
    user: AbstractBaseUser,
    run_id: UUID | str,
    index: int,
    note: str,
    more: Callable[[Step], dict[str, Any]] = lambda step: {},
) -> Step:
    """One person's decision on a step waiting for approval (`decide` is step_approve or
    step_deny) and its audit entry `action`, in one transaction. A request past its expiry is
    denied first, and that stays recorded even if this decision is then refused."""
    approval_expire_if_due(run_id=run_id, index=index)
    with transaction.atomic():
        step = decide(run_id=run_id, index=index, by=user.get_username(), note=note)
        details = {"run_id": str(run_id), "index": index, "step": step.name, **more(step)}
        audit_record(
            actor=user,
            action=action,
            target=step_target(run_id, index),
            note=note,
            details=details,
        )
        return step


def review_step_approve(
    *, user: AbstractBaseUser, run_id: UUID | str, index: int, note: str = ""
) -> Step:
    """One person's approval (the audit entry names what was approved: the arguments' hash)."""
    return _step_decided(
        step_approve,
        "step.approve",
        user=user,
        run_id=run_id,
        index=index,
        note=note,
        more=lambda step: {"arguments_hash": step.arguments_hash, "state": step.state},
    )


def review_step_deny(*, user: AbstractBaseUser, run_id: UUID | str, index: int, note: str) -> Step:
    return _step_decided(step_deny, "step.deny", user=user, run_id=run_id, index=index, note=note)


BULK_RESOLUTIONS = ("sent", "retry", "abandon")


def review_steps_decide(
    *,
    user: AbstractBaseUser,
    items: list[tuple[str, int]],
    action: str,
    note: str,
    confirmed_may_repeat: bool = False,
) -> list[Step]:
    """One decision for many items that share their tool and their situation (same tool name,
    state and enforcer): all or none, one audit entry per item, as if decided one by one."""
    steps = [Step.objects.filter(run_id=run_id, index=index).first() for run_id, index in items]
    missing = [f"{r}#{i}" for (r, i), s in zip(items, steps, strict=True) if s is None]
    if missing or not steps:
        raise ApplicationError(
            "not_found", f"No such items: {', '.join(missing)}.", status_code=404
        )
    barred = [
        f"{s.run_id}#{s.index}"
        for s in steps
        if s is not None and not user.has_perm("review.resolve", s)  # type: ignore[attr-defined]
    ]
    if barred:
        # a person sees a team's items with any role there; deciding them takes a resolver's
        raise ApplicationError(
            "forbidden",
            f"You may not decide items of these runs' teams: {', '.join(barred)}.",
            status_code=403,
        )
    kinds = {(s.name, s.state, s.enforced_by) for s in steps if s is not None}
    if len(kinds) > 1:
        raise ApplicationError(
            "validation_error",
            "Decide together only items of the same tool in the same situation; these are "
            + "; ".join(sorted(f"{n} ({st}, enforced by {e})" for n, st, e in kinds))
            + ".",
            status_code=400,
        )
    decide: Callable[..., Step]
    if action in BULK_RESOLUTIONS:
        decide = partial(
            review_step_resolve, action=action, confirmed_may_repeat=confirmed_may_repeat
        )
    elif action in ("approve", "deny"):
        decide = review_step_approve if action == "approve" else review_step_deny
    else:
        raise ApplicationError("validation_error", "Unknown action.", status_code=400)
    with transaction.atomic():
        return [decide(user=user, run_id=r, index=i, note=note) for r, i in items]


def review_step_settle_by_lookup(*, run_id: UUID | str, index: int) -> LookupAnswer | None:
    """Ask the tool's lookup about an unknown step's key; a definite answer settles the step.

    completed → resolved `sent` (the tool did it); absent → resolved `retry` (it never took
    effect, so the same key runs it once). Either is recorded as the step's resolution by
    `system:lookup`, with the answer in the note, and audited. No answer (late, failed, unclear)
    leaves the item to a person; it is audited once per step. None: the tool has no lookup.
    """
    step = Step.objects.filter(run_id=run_id, index=index).first()
    if step is None or step.state != StepState.UNKNOWN or not lookup_for(step.name):
        return None
    answer = tool_lookup(step.name, step.idempotency_key)
    if answer is None:
        return None
    target = step_target(run_id, index)
    if answer.state == "no_answer":
        if not AuditEntry.objects.filter(action="step.lookup.no_answer", target=target).exists():
            audit_record(
                actor="system:lookup",
                action="step.lookup.no_answer",
                target=target,
                details={"source": answer.source, "detail": answer.detail},
            )
        return answer
    action = Resolution.SENT if answer.state == "completed" else Resolution.RETRY
    note = (
        f"The tool's lookup ({answer.source}) answered {answer.state} for key "
        f"{step.idempotency_key}."
    )
    try:
        with transaction.atomic():
            step_resolve(
                run_id=run_id,
                index=index,
                action=action,
                note=note,
                by="system:lookup",
                result={"settled_by_lookup": answer.state} if action == Resolution.SENT else None,
            )
            audit_record(
                actor="system:lookup",
                action=f"step.settle.{action}",
                target=target,
                note=note,
                details={"source": answer.source, "answer": answer.state},
            )
    except ApplicationError:
        pass  # a person decided meanwhile: theirs stands
    return answer
