"""Console views: permission check, form validation, one service call, a redirect or a page."""

import contextlib
from typing import Any
from uuid import UUID

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console import overview as fleet
from console import services
from console.forms import BulkForm, CancelForm, ForkForm
from review.forms import RunFilterForm
from review.views import _form_errors, _get_run, _posted, _tell, require_perm


def _back(run_id: Any) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("review:run", args=[run_id]) + "#run-actions")


@require_POST
@require_perm("run_actions")
def run_cancel(request: HttpRequest, run_id: UUID) -> HttpResponse:
    run = _get_run(run_id)
    form = _posted(request, CancelForm)
    if form is not None:
        _tell(
            request,
            lambda: services.console_run_cancel(
                user=request.user,  # type: ignore[arg-type]
                run_id=run.pk,
                note=form.cleaned_data["note"],
            ),
            lambda _: "Run cancelled: its worker's next write is refused.",
        )
    return _back(run.pk)


@require_POST
@require_perm("run_actions")
def run_fork(request: HttpRequest, run_id: UUID) -> HttpResponse:
    run = _get_run(run_id)
    form = _posted(request, ForkForm)
    if form is None:
        return _back(run.pk)
    fork = _tell(
        request,
        lambda: services.console_run_fork(
            user=request.user,  # type: ignore[arg-type]
            run_id=run.pk,
            index=form.cleaned_data["index"],
            note=form.cleaned_data["note"],
        ),
        lambda fork: (
            f"Fork created with steps 0–{fork.forked_from_index - 1} copied"
            if fork.forked_from_index
            else "Fork created from the start (no steps copied)."
        ),
    )
    if fork is None:
        return _back(run.pk)
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
        outcome = _tell(
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
        messages.error(request, _form_errors(form))
    count = services.bulk_count(filters, action)
    query = request.GET.copy()
    query.pop("action", None)
    context = {
        "nav": "runs",
        "filter_form": filter_form,
        "action": action,
        "count": count,
        "limit": services.BULK_LIMIT,
        "over_limit": count > services.BULK_LIMIT,
        "query": query.urlencode(),
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
        request, "console/overview.html", {"nav": "overview", **fleet.overview(days=days)}
    )
