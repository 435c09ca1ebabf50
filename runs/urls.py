from django.urls import URLPattern, path
from rest_framework.views import APIView

from runs import apis
from runs.hotpath import hot_view
from runs.waiting import wait_door


def _hot(route: str, call: str, view: type[APIView], name: str) -> URLPattern:
    """A hot call's URL: its lean path answers first (runs/hotpath.py); the DRF view answers
    what the lean path declines, and is what the OpenAPI schema describes."""
    return path(route, hot_view(call, view.as_view()), name=name)


urlpatterns = [
    _hot("runs/", "create", apis.RunCreateApi, "run-create"),
    path("runs/<uuid:run_id>/", wait_door(apis.RunDetailApi.as_view()), name="run-detail"),
    _hot("runs/<uuid:run_id>/lease", "lease", apis.RunLeaseApi, "run-lease"),
    _hot("runs/<uuid:run_id>/heartbeat", "heartbeat", apis.RunHeartbeatApi, "run-heartbeat"),
    _hot("runs/<uuid:run_id>/steps/", "intent", apis.StepIntentApi, "run-step-intent"),
    path("runs/<uuid:run_id>/steps/<int:index>/", apis.StepDetailApi.as_view(), name="run-step"),
    _hot(
        "runs/<uuid:run_id>/steps/<int:index>/outcome",
        "outcome",
        apis.StepOutcomeApi,
        "run-step-outcome",
    ),
    _hot("runs/<uuid:run_id>/complete", "complete", apis.RunCompleteApi, "run-complete"),
    _hot("runs/<uuid:run_id>/fail", "fail", apis.RunFailApi, "run-fail"),
    path("runs/<uuid:run_id>/journal", apis.RunJournalApi.as_view(), name="run-journal"),
]
