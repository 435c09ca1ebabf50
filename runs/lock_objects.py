"""Row locks, taken in one order (the run first, then its steps) so transactions never deadlock."""

from uuid import UUID

from django.db.models import QuerySet

from runs.api_errors import ApplicationError
from runs.models import Run


def run_for_update(run_id: UUID | str) -> Run:
    """Lock and return the run; 404 in the API's envelope when there is none."""
    run = Run.objects.select_for_update().filter(pk=run_id).first()
    if run is None:
        raise ApplicationError("not_found", f"No run {run_id}.", status_code=404)
    return run


def runs_for_update(run_ids: list[UUID | str]) -> QuerySet[Run]:
    return Run.objects.select_for_update().filter(pk__in=run_ids).order_by("pk")
