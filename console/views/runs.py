"""The runs list and a run's page, with every action the page offers: its transcript, its chain
check, and a person's actions on the run (decide, raise limits, cancel, fork, legal hold). Each
action is a view here that calls one service (review.services.runs, console.services,
audit.retention) and comes back to the page. The routes keep the names they had
(`review:run`, `console:run_fork`, `audit:run_legal_hold`, …): console/urls.py lists them."""

from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from audit.forms import LegalHoldForm
from audit.retention import legal_hold_change
from console import services
from console.forms import CancelForm, ForkForm
from dashboard.views.common import (
    View,
    is_htmx,
    person,
    posted,
    render_polled,
    require_perm,
    require_perm_on,
    tell,
)
from review import selectors, toolside
from review.forms import DecideForm, LimitsForm, RunFilterForm
from review.services.runs import review_limits_raise, review_run_decide
from runs import clock
from runs.chain import run_chain_breaks
from runs.constants import FINAL_STATUSES, LIVE_STATUSES, RunStatus, StepState
from runs.models import Event, Run, Step
from runs.services.budgets import budget_of
from runs.vocabulary import EventType


def _run_rows(runs: list[Run]) -> list[dict[str, Any]]:
    unknown = selectors.runs_unknown_counts([r.pk for r in runs])
    return [
        {"run": r, "unknown": unknown.get(r.pk, 0), "live": r.status in LIVE_STATUSES} for r in runs
    ]


@require_GET
@require_perm("browse")
def runs_list(request: HttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET or None)
    filters = form.filters()
    page = (form.cleaned_data.get("page") if form.is_valid() else None) or 1
    runs, has_next = selectors.runs_page(filters, page=page)
    rows = _run_rows(runs)
    any_live = any(r["live"] for r in rows)
    context = {
        "nav": "runs",
        "form": form,
        "rows": rows,
        "page": page,
        "has_next": has_next,
        "any_live": any_live,
        "counts": selectors.run_status_counts(),
        "count_cap": selectors.STATUS_COUNT_CAP,
        "current_status": filters.status,
        "agents": selectors.run_agents(),
    }
    if is_htmx(request):
        return render_polled(request, "console/runs.html#rows", context, stop=not any_live)
    return render(request, "console/runs.html", context)


def get_run(run_id: UUID) -> Run:
    run = Run.objects.select_related("policy").filter(pk=run_id).first()
    if run is None:
        raise Http404("No such run.")
    return run


def _transcript_context(request: HttpRequest, run: Run) -> dict[str, Any]:
    steps = list(Step.objects.filter(run=run).select_related("claimed_by").order_by("index"))
    events = list(Event.objects.filter(run=run).order_by("seq"))
    keys = toolside.key_states([s.idempotency_key for s in steps if s.effect == "write"])
    step_rows = [
        {"step": s, "key": keys.get(s.idempotency_key) if s.effect == "write" else None}
        for s in steps
    ]
    budget = budget_of(run)
    now = clock.now()
    # a run stopped by a budget is not final (raised limits resume it), but it spends no time:
    # its bar stands where it stopped, as a finished run's does
    stopped_at = run.finished_at or (
        next((e.at for e in reversed(events) if e.type == EventType.BUDGET_EXCEEDED), None)
        if run.status == RunStatus.BUDGET_EXCEEDED
        else None
    )
    wall_used = int(((stopped_at or now) - run.created_at).total_seconds())
    # a lease is current only while a live run's holder may still write: a stopped run, or one
    # whose lease ran out, shows who held it last and when that ended
    lease_current = bool(
        run.lease_worker
        and run.lease_expires_at
        and run.lease_expires_at > now
        and run.status in LIVE_STATUSES
        and run.status != RunStatus.NEEDS_REVIEW
    )
    has_unknown = any(s.state == StepState.UNKNOWN for s in steps)
    return {
        "nav": "runs",
        "run": run,
        "budget": budget,
        "wall_used": wall_used,
        # waiting for a person stops no clock: the deadline is the creation time plus the limit
        "wall_label": "wall clock s (runs on while it waits)"
        if run.status == RunStatus.NEEDS_REVIEW
        else "wall clock s (when it stopped)"
        if run.status == RunStatus.BUDGET_EXCEEDED
        else "wall clock s",
        "lease_current": lease_current,
        "step_rows": step_rows,
        "events": events,
        "history": selectors.run_history(events),
        "duplicates": selectors.duplicates_prevented(events, sum(k.replays for k in keys.values())),
        "live": run.status in LIVE_STATUSES,
        "final": run.status in FINAL_STATUSES,
        "can_decide": run.status == RunStatus.NEEDS_REVIEW
        and not has_unknown
        and request.user.has_perm("review.resolve", run),
        "can_raise": request.user.has_perm("review.raise_limits", run)
        and run.status not in FINAL_STATUSES,
        "can_hold": request.user.has_perm("review.manage_audit", run),
        "decide_form": DecideForm(),
        "limits_form": LimitsForm(),
    }


@require_GET
@require_perm("browse")
def run_detail(request: HttpRequest, run_id: UUID) -> HttpResponse:
    run = get_run(run_id)
    context = _transcript_context(request, run)
    if is_htmx(request) and request.GET.get("part") == "live":
        return render_polled(request, "console/run.html#live", context, stop=not context["live"])
    return render(request, "console/run.html", context)


@require_GET
@require_perm("browse")
def run_verify(request: HttpRequest, run_id: UUID) -> HttpResponse:
    """Recompute the run's hash chain (read-only) and show the result."""
    run = get_run(run_id)
    breaks = run_chain_breaks(run)
    context = {"run": run, "breaks": breaks, "verified": True, "event_count": run.event_seq}
    if is_htmx(request):
        return render(request, "console/run.html#verify", context)
    if breaks:
        messages.error(request, f"The chain is broken in {len(breaks)} place(s).")
    else:
        messages.success(request, f"The chain holds: {run.event_seq} events verified.")
    return HttpResponseRedirect(reverse("review:run", args=[run.pk]))


def run_post[F: forms.Form, T](
    request: HttpRequest,
    run_id: UUID,
    form_class: type[F],
    act: Callable[[Any, Run, F], T],
    ok: Callable[[T], str],
) -> tuple[Run, T | None]:
    """A POST from a run's page: the run (404 if none), its valid form, then one service call
    `act(user, run, form)`, told as a message (`tell`). The run, and what the call returned."""
    run = get_run(run_id)
    form = posted(request, form_class)
    if form is None:
        return run, None
    user = request.user
    return run, tell(request, lambda: act(user, run, form), ok)


def run_page_action[F: forms.Form](
    permission: str, form_class: type[F], anchor: str = ""
) -> Callable[[Callable[[HttpRequest, Run, F], str]], View]:
    """Makes an action on a run's page (POST, review.<permission>) of a function that calls one
    service with the run and its valid form and returns what to tell the person: `run_post`
    (404, the form's errors, a refusal told as a message), then back to the run's page at
    `anchor`. The view keeps the function's name, so a search for it finds the view."""

    def decorate(act: Callable[[HttpRequest, Run, F], str]) -> View:
        @require_POST
        @require_perm(permission)
        @wraps(act)
        def view(request: HttpRequest, run_id: UUID) -> HttpResponse:
            require_perm_on(request, permission, get_run(run_id))  # in the run's team
            run, _ = run_post(
                request, run_id, form_class, lambda _, run, form: act(request, run, form), str
            )
            return HttpResponseRedirect(reverse("review:run", args=[run.pk]) + anchor)

        return view

    return decorate


@run_page_action("resolve", DecideForm)
def run_decide(request: HttpRequest, run: Run, form: DecideForm) -> str:
    """Resume or abandon a run in review that has no unknown step."""
    run = review_run_decide(user=person(request), run_id=run.pk, **form.cleaned_data)
    if run.status == RunStatus.ABANDONED:
        return "Run abandoned."
    return f"Run resumed. {selectors.run_resumed_by(run)}"


def limits_outcome(run: Run) -> str:
    """What raising limits did, and what still blocks the run if anything does."""
    budget = budget_of(run)
    if run.status == RunStatus.BUDGET_EXCEEDED:
        limit = run.status_reason
        used = budget["used"].get(limit)
        cap = budget["limits"].get(limit)
        spent = f" ({used} of {cap})" if used is not None else ""
        return (
            f"Limits raised, but the run is still stopped: its {limit} budget is spent{spent}. "
            f"Raise {limit} too for it to resume."
        )
    if run.status == RunStatus.RUNNING:
        return (
            f"Limits raised; the run resumes with the next lease. {selectors.run_resumed_by(run)}"
        )
    return f"Limits raised; the run is {run.status}."


@run_page_action("raise_limits", LimitsForm)
def run_limits(request: HttpRequest, run: Run, form: LimitsForm) -> str:
    """Raise a run's limits; the message says whether that was enough for it to resume."""
    note, limits = form.cleaned_data["note"], form.limits()
    return limits_outcome(
        review_limits_raise(user=person(request), run_id=run.pk, note=note, limits=limits)
    )


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
    require_perm_on(request, "run_actions", get_run(run_id))
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


@run_page_action("manage_audit", LegalHoldForm, anchor="#legal-hold")
def run_legal_hold(request: HttpRequest, run: Run, form: LegalHoldForm) -> str:
    """Put a run on legal hold (retention keeps it) or lift the hold."""
    held = legal_hold_change(
        actor=person(request),
        run_id=run.pk,
        on=form.cleaned_data["hold"] == "on",
        note=form.cleaned_data["note"],
    )
    if held.legal_hold:
        return "The run is on legal hold: retention keeps it."
    return "Legal hold lifted: retention treats the run like any other."
