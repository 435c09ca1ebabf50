"""The console's routes. The run pages' routes keep the names the contract and the tests know,
in the namespaces they were born in (`review:runs`, `review:run`, `audit:run_legal_hold`), so
review/urls.py and audit/urls.py serve those lists under their names; the rest are `console:`."""

from django.urls import URLPattern, path

from console.views import fleet, runs

app_name = "console"

urlpatterns: list[URLPattern] = [
    path("", fleet.overview, name="overview"),
    path("runs/<uuid:run_id>/cancel", runs.run_cancel, name="run_cancel"),
    path("runs/<uuid:run_id>/fork", runs.run_fork, name="run_fork"),
    path("bulk/", fleet.bulk, name="bulk"),
]

# under the namespace `review` (review/urls.py)
review_namespace: list[URLPattern] = [
    path("", runs.runs_list, name="runs"),
    path("runs/<uuid:run_id>/", runs.run_detail, name="run"),
    path("runs/<uuid:run_id>/verify", runs.run_verify, name="run_verify"),
    path("runs/<uuid:run_id>/decide", runs.run_decide, name="run_decide"),
    path("runs/<uuid:run_id>/limits", runs.run_limits, name="run_limits"),
]

# under the namespace `audit` (audit/urls.py, mounted under /audit/)
audit_namespace: list[URLPattern] = [
    path("runs/<uuid:run_id>/legal-hold", runs.run_legal_hold, name="run_legal_hold"),
]
