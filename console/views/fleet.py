"""The fleet's pages: the overview, and bulk actions on the runs a filter selects."""

import contextlib

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods

from console import overview as fleet
from console import services
from console.forms import BulkForm
from dashboard.views.common import form_errors, require_perm, tell
from review.forms import RunFilterForm


@require_http_methods(["GET", "POST"])
@require_perm("run_actions", narrow=True)
def bulk(request: HttpRequest) -> HttpResponse:
    """GET: the selection's count and a confirmation; POST: act on exactly that many runs."""
    filter_form = RunFilterForm(request.GET or None)
    filters = filter_form.filters()
    action = request.POST.get("action") or request.GET.get("action") or "cancel"
    if action not in ("cancel", "resume"):
        action = "cancel"
    outcome = None
    form = BulkForm(request.POST or None, initial={"action": action})
    if request.method == "POST" and form.is_valid():
        verb = "Cancelled" if action == "cancel" else "Resumed"
        outcome = tell(
            request,
            lambda: services.console_bulk(
                user=request.user,  # type: ignore[arg-type]
                filters=filters,
                action=form.cleaned_data["action"],
                note=form.cleaned_data["note"],
                expected=form.cleaned_data["expected"],
            ),
            lambda done: (
                f"{verb} {len(done.done)} run{'s' if len(done.done) != 1 else ''}"
                + (f"; {len(done.skipped)} skipped" if done.skipped else "")
                + "."
            ),
        )
    elif request.method == "POST":
        messages.error(request, form_errors(form))
    count = services.bulk_count(filters, action)
    context = {
        "nav": "runs",
        "filter_form": filter_form,
        "action": action,
        "count": count,
        "limit": services.BULK_LIMIT,
        "over_limit": count > services.BULK_LIMIT,
        "outcome": outcome,
        "sample": list(services.bulk_selection(filters, action)[:10]),
    }
    return render(request, "console/bulk.html", context, status=200)


@require_GET
@require_perm("browse")
def overview(request: HttpRequest) -> HttpResponse:
    days = 14
    with contextlib.suppress(ValueError):
        days = max(1, min(int(request.GET.get("days", days)), 90))
    return render(
        request,
        "console/overview.html",
        {
            "nav": "overview",
            **fleet.overview(days=days),
            "metrics_on": bool(getattr(settings, "METRICS_TOKEN", "")),
        },
    )
