"""Run actions from the console: each calls the journal's service and writes its audit entry in
the same transaction (an action without its entry, or the reverse, cannot commit)."""

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import QuerySet

from dashboard.audit import audit_record
from review.selectors import RunFilters, review_runs_without_unknown, runs_filtered
from review.services.runs import review_run_decide
from runs.api_errors import ApplicationError, invalid, note_required
from runs.constants import CANCELLABLE_STATUSES
from runs.models import Run
from runs.services.actions import run_cancel
from runs.services.forks import run_fork

BULK_LIMIT = 500  # runs one confirmation may act on; narrow the filter for more


def console_run_cancel(*, user: AbstractBaseUser, run_id: UUID | str, note: str) -> Run:
    with transaction.atomic():
        run = run_cancel(run_id=run_id, by=user.get_username(), note=note)
        audit_record(
            actor=user,
            action="run.cancel",
            target=f"run:{run_id}",
            note=note,
            details={"status": run.status, "epoch": run.epoch},
        )
        return run


def console_run_fork(
    *,
    user: AbstractBaseUser,
    run_id: UUID | str,
    index: int,
    note: str,
    writes: dict[str, str] | None = None,
) -> Run:
    """A fork (runs.services.forks.run_fork: `writes` holds or runs again, per tool, the writes the
    original made after the fork point) and its audit entry, which records those choices."""
    with transaction.atomic():
        fork = run_fork(
            run_id=run_id, index=index, by=user.get_username(), note=note, writes=writes
        )
        audit_record(
            actor=user,
            action="run.fork",
            target=f"run:{run_id}",
            note=note,
            details={"fork_run_id": str(fork.pk), "index": index, "writes": writes or {}},
        )
        return fork


def bulk_selection(filters: RunFilters, action: str) -> QuerySet[Run]:
    """The runs a filter selects that the action applies to (others are left alone)."""
    runs = runs_filtered(filters)
    if action == "cancel":
        return runs.filter(status__in=CANCELLABLE_STATUSES)
    if action == "resume":
        return runs.filter(pk__in=review_runs_without_unknown().values("pk"))
    raise invalid("action", "Unknown bulk action.", "cancel or resume")


def bulk_count(filters: RunFilters, action: str) -> int:
    return bulk_selection(filters, action)[: BULK_LIMIT + 1].count()


@dataclass
class BulkOutcome:
    done: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # run id -> why


def console_bulk(
    *, user: AbstractBaseUser, filters: RunFilters, action: str, note: str, expected: int
) -> BulkOutcome:
    """Cancel or resume every run the filter selects, after the person confirmed the count.

    Refused when the selection no longer has the count that was confirmed (runs finished or
    arrived meanwhile) or exceeds BULK_LIMIT. Each run is its own transaction with its own event
    and audit entry; a run that changed state meanwhile is skipped with its reason. One more
    audit entry records the bulk action itself.
    """
    note_required(note)
    ids = list(bulk_selection(filters, action).values_list("pk", flat=True)[: BULK_LIMIT + 1])
    if len(ids) > BULK_LIMIT:
        raise invalid(
            "filter",
            f"More than {BULK_LIMIT} runs are selected; narrow the filter.",
            f"at most {BULK_LIMIT} runs",
        )
    if len(ids) != expected:
        raise ApplicationError(
            "selection_changed",
            f"The filter selects {len(ids)} runs now, not the {expected} you confirmed; "
            "check the selection again.",
            details={"now": len(ids), "confirmed": expected},
        )
    outcome = BulkOutcome()
    for run_id in ids:
        try:
            if action == "cancel":
                console_run_cancel(user=user, run_id=run_id, note=note)
            else:
                review_run_decide(user=user, run_id=run_id, action="resume", note=note)
        except ApplicationError as exc:
            outcome.skipped[str(run_id)] = exc.message
        else:
            outcome.done.append(str(run_id))
    audit_record(
        actor=user,
        action=f"run.bulk.{action}",
        target=f"runs:{len(outcome.done)}",
        note=note,
        details={
            "filters": _filters_json(filters),
            "confirmed": expected,
            "done": outcome.done,
            "skipped": outcome.skipped,
        },
    )
    return outcome


def _filters_json(filters: RunFilters) -> dict[str, Any]:
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in vars(filters).items()}
