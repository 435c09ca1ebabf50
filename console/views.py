"""Console views: permission check, form validation, one service call, a redirect or a page."""

import contextlib
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import overview as fleet
from console import services
from console.forms import BulkForm, CancelForm, ForkForm
from dashboard.views.common import form_errors, person, query_without, require_perm, tell
from review.forms import RunFilterForm
from review.views.runs import run_page_action, run_post
from runs.models import Run


@run_page_action("run_actions", CancelForm, anchor="#run-actions")
def run_cancel(request: HttpRequest, run: Run, form: CancelForm) -> str:
    """Cancel a live run: the journal refuses its worker's next write."""
    services.console_run_cancel(user=person(request), run_id=run.pk, **form.cleaned_data)
    return "Run cancelled: its worker's next write is refused."


def fork_create(user: Any, run: Run, form: ForkForm) -> Run:
    return services.console_run_fork(user=user, run_id=run.pk, **form.cleaned_data)


def fork_outcome(fork: Run) -> str:
    if fork.forked_from_index:
        return f"Fork created with steps 0–{fork.forked_from_index - 1} copied"
    return "Fork created from the start (no steps copied)."


@require_POST
@require_perm("run_actions")
def run_fork(request: HttpRequest, run_id: UUID) -> HttpResponse:
    """The fork's page when it was created; otherwise the original run's actions, showing the
    fork's plan (the writes after the fork point to choose for, where it will run)."""
    answer = run_post(request, run_id, ForkForm, fork_create, ok=fork_outcome)
    original, fork = answer
    if fork is None:
        plan = urlencode(
            {"fork": request.POST.get("index", ""), "fork_note": request.POST.get("note", "")}
        )
        return HttpResponseRedirect(
            reverse("review:run", args=[original.pk]) + f"?{plan}#run-actions"
        )
    return HttpResponseRedirect(reverse("review:run", args=[fork.pk]))


@require_http_methods(["GET", "POST"])
@require_perm("run_actions")
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
        "query": query_without(request, "action"),
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
