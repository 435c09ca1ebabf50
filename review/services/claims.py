"""Who works on a desk item: claims, releases and assignments, each audited.

Lock precondition: none held by the caller. Each function opens its own transaction and locks
the step row (`select_for_update`) before reading its claim, so two people claiming the same item
are serialized by the database and the second is refused.
"""

from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from dashboard.audit import audit_record
from runs import clock
from runs.api_errors import ApplicationError, invalid
from runs.constants import StepState
from runs.models import Step
from teams.services import resolvers_in


def claim_seconds() -> int:
    return int(getattr(settings, "REVIEW_CLAIM_SECONDS", 15 * 60))


def step_target(run_id: UUID | str, index: int) -> str:
    return f"step:{run_id}#{index}"


def review_step_claim(*, user: AbstractBaseUser, run_id: UUID | str, index: int) -> Step:
    """Claim an unknown step for `claim_seconds()`; a live claim by someone else is refused."""
    with transaction.atomic():
        step = (
            Step.objects.select_for_update()
            .filter(run_id=run_id, index=index)
            .select_related(None)
            .first()
        )
        if step is None:
            raise ApplicationError("not_found", "No such step.", status_code=404)
        if step.state not in (StepState.UNKNOWN, StepState.AWAITING_APPROVAL):
            raise ApplicationError(
                "not_unknown", f"Step {index} is {step.state}; there is nothing to claim."
            )
        now = clock.now()
        if step.claimed_by_id != user.pk and step.claim_is_live(now):
            assert step.claimed_by_id is not None
            holder = get_user_model()._default_manager.get(pk=step.claimed_by_id)
            raise ApplicationError(
                "claimed",
                f"{holder.get_username()} already claimed this item "
                f"until {step.claim_expires_at:%H:%M:%S} UTC.",
                details={"by": holder.get_username()},
            )
        step.claimed_by_id = user.pk
        step.claim_expires_at = now + timedelta(seconds=claim_seconds())
        step.save(update_fields=["claimed_by", "claim_expires_at"])
        audit_record(
            actor=user,
            action="step.claim",
            target=step_target(run_id, index),
            details={"until": step.claim_expires_at.isoformat()},
        )
        return step


def review_step_release(*, user: AbstractBaseUser, run_id: UUID | str, index: int) -> Step:
    """Give up one's own claim (someone else's live claim is not released)."""
    with transaction.atomic():
        step = Step.objects.select_for_update().filter(run_id=run_id, index=index).first()
        if step is None:
            raise ApplicationError("not_found", "No such step.", status_code=404)
        if step.claimed_by_id != user.pk:
            raise ApplicationError("not_claimed", "You do not hold a claim on this item.")
        step.claimed_by = None
        step.claim_expires_at = None
        step.save(update_fields=["claimed_by", "claim_expires_at"])
        audit_record(actor=user, action="step.release", target=step_target(run_id, index))
        return step


def review_step_assign(
    *, user: AbstractBaseUser, run_id: UUID | str, index: int, assignee: str
) -> Step:
    """Give an item to a person (a claim in their name, for `claim_seconds()`); reassigning an
    item someone else holds is allowed and audited with who had it."""
    with transaction.atomic():
        step = Step.objects.select_for_update().filter(run_id=run_id, index=index).first()
        if step is None:
            raise ApplicationError("not_found", "No such step.", status_code=404)
        if step.state not in (StepState.UNKNOWN, StepState.AWAITING_APPROVAL):
            raise ApplicationError(
                "not_unknown", f"Step {index} is {step.state}; there is nothing to assign."
            )
        person = resolvers_in(step.team_id).filter(username=assignee).first()
        if person is None:
            raise invalid(
                "assignee", f"{assignee} cannot decide review items.", "Not someone who may decide."
            )
        previous = step.claimed_by.get_username() if step.claimed_by else None
        step.claimed_by = person
        step.claim_expires_at = clock.now() + timedelta(seconds=claim_seconds())
        step.save(update_fields=["claimed_by", "claim_expires_at"])
        audit_record(
            actor=user,
            action="step.assign",
            target=step_target(run_id, index),
            details={"to": assignee, "from": previous, "until": step.claim_expires_at.isoformat()},
        )
        return step
