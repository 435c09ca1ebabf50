from django.urls import path

from runs import apis
from runs.hotpath import hot_view
from runs.waiting import wait_door

urlpatterns = [
    path("runs/", hot_view("create", apis.RunCreateApi.as_view()), name="run-create"),
    path("runs/<uuid:run_id>/", wait_door(apis.RunDetailApi.as_view()), name="run-detail"),
    path(
        "runs/<uuid:run_id>/lease",
        hot_view("lease", apis.RunLeaseApi.as_view()),
        name="run-lease",
    ),
    path(
        "runs/<uuid:run_id>/heartbeat",
        hot_view("heartbeat", apis.RunHeartbeatApi.as_view()),
        name="run-heartbeat",
    ),
    path(
        "runs/<uuid:run_id>/steps/",
        hot_view("intent", apis.StepIntentApi.as_view()),
        name="run-step-intent",
    ),
    path("runs/<uuid:run_id>/steps/<int:index>/", apis.StepDetailApi.as_view(), name="run-step"),
    path(
        "runs/<uuid:run_id>/steps/<int:index>/outcome",
        hot_view("outcome", apis.StepOutcomeApi.as_view()),
        name="run-step-outcome",
    ),
    path(
        "runs/<uuid:run_id>/complete",
        hot_view("complete", apis.RunCompleteApi.as_view()),
        name="run-complete",
    ),
    path("runs/<uuid:run_id>/fail", hot_view("fail", apis.RunFailApi.as_view()), name="run-fail"),
    path("runs/<uuid:run_id>/journal", apis.RunJournalApi.as_view(), name="run-journal"),
]
