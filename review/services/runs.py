"""A supervisor's action on a whole run: resume or abandon one in review, raise its limits.

Lock precondition: none held by the caller. The journal's services (`runs.services`) lock the
run row; these functions open the transaction the audit entry joins.
"""

from typing import Any
from uuid import UUID

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from dashboard.audit import audit_record
from runs.constants import BUDGET_LIMITS
from runs.models import Run
from runs.services.actions import run_limits_raise
from runs.services.decisions import run_review_decide


def review_run_decide(*, user: AbstractBaseUser, run_id: UUID | str, action: str, note: str) -> Run:
    """Resume or abandon a run in review that has no unknown step (a crash loop)."""
    with transaction.atomic():
        run = run_review_decide(run_id=run_id, action=action, note=note, by=user.get_username())
        audit_record(
            actor=user,
            action=f"run.review.{action}",
            target=f"run:{run_id}",
            note=note,
            details={"status": run.status},
        )
        return run


LIMIT_FIELDS = tuple(f"limit_{name}" for name in BUDGET_LIMITS)


def review_limits_raise(
    *, user: AbstractBaseUser, run_id: UUID | str, note: str, limits: dict[str, Any]
) -> Run:
    with transaction.atomic():
        current = Run.objects.filter(pk=run_id).first()
        previous = (
            {
                f: None if getattr(current, f) is None else str(getattr(current, f))
                for f in LIMIT_FIELDS
            }
            if current
            else {}
        )
        run = run_limits_raise(run_id=run_id, by=user.get_username(), note=note, limits=limits)
        audit_record(
            actor=user,
            action="run.limits.raise",
            target=f"run:{run_id}",
            note=note,
            details={
                "before": previous,
                "requested": {k: str(v) for k, v in limits.items() if v is not None},
                "status": run.status,
            },
        )
        return run
