"""Reads for the dashboard pages: bounded, index-friendly queries (see the partial indexes in runs)."""

from django.db.models import Exists, OuterRef, QuerySet

from runs.constants import RunStatus, StepState
from runs.models import Run, Step


def review_runs_without_unknown() -> QuerySet[Run]:
    unknown = Step.objects.filter(run=OuterRef("pk"), state=StepState.UNKNOWN)
    return Run.objects.filter(status=RunStatus.NEEDS_REVIEW).exclude(Exists(unknown))


def waiting_count() -> int:
    """Unknown steps (step_unknown_idx) plus runs in review with no unknown step (crash loops)."""
    return (
        Step.objects.filter(state=StepState.UNKNOWN).count() + review_runs_without_unknown().count()
    )
