"""Dashboard views: permission check, form validation, one service call, a redirect or a partial.

Every view checks its permission server-side (a hidden button is not a permission). htmx
requests get the page's partial ("page.html#name"); without JavaScript, forms post and redirect.
"""

import unicodedata
from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse, reverse_lazy
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling, trigger_client_event

from review import evidence, selectors, services, toolside
from review.audit import audit_record
from review.forms import (
    ApprovalRuleForm,
    ApproveForm,
    AssignForm,
    AuditedModelForm,
    AuditFilterForm,
    BulkDecideForm,
    DecideForm,
    DenyForm,
    LimitsForm,
    PolicyForm,
    ResolveForm,
    RunFilterForm,
    TokenForm,
    WebhookForm,
)
from review.models import AuditEntry
from review.templatetags.review import waiting_badge
from runs import clock
from runs.api_errors import ApplicationError
from runs.chain import run_chain_breaks
from runs.constants import FINAL_STATUSES, LIVE_STATUSES, RunStatus, StepState
from runs.models import ApprovalRule, BudgetPolicy, Event, Run, Step, WorkerToken
from runs.services.budgets import budget_of
from tools.models import McpTool, McpToolMark

View = Callable[..., HttpResponse]


def require_perm(codename: str) -> Callable[[View], View]:
    """Logged in (else the login page) and holding review.<codename> (else 403)."""

    def decorate(view: View) -> View:
        @wraps(view)
        @login_required
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.has_perm(f"review.{codename}"):
                return refused(request, codename)
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


def refused(request: HttpRequest, codename: str) -> HttpResponse:
    """A 403 page, an audit entry, and one log line ("Forbidden: /path", from Django's request
    log): an expected refusal is not an error with a traceback."""
    audit_record(
        actor=request.user,  # type: ignore[arg-type]
        action="access.refused",
        target=request.path[:300],
        details={"method": request.method, "permission": codename},
    )
    return render(request, "403.html", {}, status=403)


def _attempted_username(request: HttpRequest) -> str:
    """The username as Django's login form reads it (NFKC, stripped), so variants share a lockout."""
    return unicodedata.normalize("NFKC", str(request.POST.get("username", ""))).strip()


def _htmx(request: HttpRequest) -> bool:
    """True for requests htmx made (django-htmx's middleware sets request.htmx)."""
    return bool(getattr(request, "htmx", False))


def query_without(request: HttpRequest, name: str) -> str:
    """The page's query string without `name`, for links that set it (a pager, an action)."""
    query = request.GET.copy()
    query.pop(name, None)
    return query.urlencode()


def _client_ip(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR") or "0.0.0.0")  # noqa: S104


# --- auth ---------------------------------------------------------------------------------------


class LoginView(auth_views.LoginView):
    """Django's login with a per-(username, ip) failure counter and a lockout window."""

    template_name = "registration/login.html"
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        from sso.conf import local_login_enabled, sso_settings

        return super().get_context_data(
            sso=sso_settings(), local_login=local_login_enabled(), **kwargs
        )

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        from sso.conf import local_login_enabled

        if not local_login_enabled():  # LOCAL_LOGIN=0: the identity provider only
            response = self.render_to_response(self.get_context_data(local_refused=True))
            response.status_code = 403
            return response
        username = _attempted_username(request)
        until = services.login_locked_until(username=username, ip=_client_ip(request))
        if until is not None:
            services.login_refused_record(username=username, ip=_client_ip(request), until=until)
            form = self.get_form()
            form.errors.clear()
            form.add_error(
                None,
                f"Too many failed logins. Try again after {until:%H:%M:%S} UTC.",
            )
            response = self.render_to_response(self.get_context_data(form=form))
            response.status_code = 429
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        username = _attempted_username(self.request)
        if username:
            services.login_failure_record(username=username, ip=_client_ip(self.request))
        return super().form_invalid(form)

    def form_valid(self, form: Any) -> HttpResponse:
        services.login_success_clear(user=form.get_user(), ip=_client_ip(self.request))
        return super().form_valid(form)


class LogoutView(auth_views.LogoutView):
    pass


class PasswordChangeView(auth_views.PasswordChangeView):
    template_name = "registration/password_change.html"
    success_url = reverse_lazy("review:runs")

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        messages.success(self.request, "Your password was changed.")
        return response


# --- runs ---------------------------------------------------------------------------------------


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
        "query": query_without(request, "page"),
        "counts": selectors.run_status_counts(),
        "count_cap": selectors.STATUS_COUNT_CAP,
        "current_status": filters.status,
        "agents": selectors.run_agents(),
    }
    if _htmx(request):
        response = render(request, "review/runs.html#rows", context)
        return _stop_polling_if(response, not any_live)
    return render(request, "review/runs.html", context)


def _stop_polling_if(response: HttpResponse, stop: bool) -> HttpResponse:
    if stop:
        stopped = HttpResponseStopPolling(response.content)
        for header, value in response.items():
            stopped[header] = value
        return stopped
    return response


def _get_run(run_id: UUID) -> Run:
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
    wall_used = int(((run.finished_at or now) - run.created_at).total_seconds())
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
        and request.user.has_perm("review.resolve"),
        "can_raise": request.user.has_perm("review.raise_limits")
        and run.status not in FINAL_STATUSES,
        "can_hold": request.user.has_perm("review.manage_audit"),
        "decide_form": DecideForm(),
        "limits_form": LimitsForm(),
    }


@require_GET
@require_perm("browse")
def run_detail(request: HttpRequest, run_id: UUID) -> HttpResponse:
    run = _get_run(run_id)
    context = _transcript_context(request, run)
    if _htmx(request) and request.GET.get("part") == "live":
        response = render(request, "review/run.html#live", context)
        return _stop_polling_if(response, not context["live"])
    return render(request, "review/run.html", context)


@require_GET
@require_perm("browse")
def run_verify(request: HttpRequest, run_id: UUID) -> HttpResponse:
    """Recompute the run's hash chain (read-only) and show the result."""
    run = _get_run(run_id)
    breaks = run_chain_breaks(run)
    context = {"run": run, "breaks": breaks, "verified": True, "event_count": run.event_seq}
    if _htmx(request):
        return render(request, "review/run.html#verify", context)
    if breaks:
        messages.error(request, f"The chain is broken in {len(breaks)} place(s).")
    else:
        messages.success(request, f"The chain holds: {run.event_seq} events verified.")
    return HttpResponseRedirect(reverse("review:run", args=[run.pk]))


def _run_post[F: forms.Form, T](
    request: HttpRequest,
    run_id: UUID,
    form_class: type[F],
    act: Callable[[Any, Run, F], T],
    ok: Callable[[T], str],
) -> tuple[Run, T | None]:
    """A POST from a run's page: the run (404 if none), its valid form, then one service call
    `act(user, run, form)`, told as a message (`_tell`). The run, and what the call returned."""
    run = _get_run(run_id)
    form = _posted(request, form_class)
    if form is None:
        return run, None
    user = request.user
    return run, _tell(request, lambda: act(user, run, form), ok)


def run_page_post[F: forms.Form, T](
    permission: str,
    form_class: type[F],
    act: Callable[[Any, Run, F], T],
    ok: Callable[[T], str],
    anchor: str = "",
) -> View:
    """An action on a run's page (POST, review.<permission>): `_run_post`, then back to the
    run's page at `anchor`."""

    @require_POST
    @require_perm(permission)
    def action(request: HttpRequest, run_id: UUID) -> HttpResponse:
        run, _ = _run_post(request, run_id, form_class, act, ok)
        return HttpResponseRedirect(reverse("review:run", args=[run.pk]) + anchor)

    return action


run_decide = run_page_post(
    "resolve",
    DecideForm,
    lambda user, run, form: services.review_run_decide(
        user=user, run_id=run.pk, **form.cleaned_data
    ),
    lambda run: (
        "Run abandoned."
        if run.status == RunStatus.ABANDONED
        else f"Run resumed. {selectors.run_resumed_by(run)}"
    ),
)


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


run_limits = run_page_post(
    "raise_limits",
    LimitsForm,
    lambda user, run, form: services.review_limits_raise(
        user=user, run_id=run.pk, note=form.cleaned_data["note"], limits=form.limits()
    ),
    limits_outcome,
)


def _form_errors(form: Any) -> str:
    """A form's errors as one message for a person: each after its field's label (never the
    field's name in the code), unless the sentence names the field itself."""
    parts: list[str] = []
    for field, errors in form.errors.items():
        known = form.fields.get(field)
        label = "" if field == "__all__" else str(known.label if known and known.label else field)
        label = label.replace("_", " ").strip()
        for error in errors:
            named = not label or label.split(" (")[0].lower() in str(error).lower()
            parts.append(str(error) if named else f"{label[:1].upper()}{label[1:]}: {error}")
    return " ".join(parts)


def _error_text(exc: ApplicationError) -> str:
    """A service's refusal for a person: its message, and what its details add to it (the
    details name fields for API clients; a person reads the sentence)."""
    details = exc.details or {}
    extra = [
        str(why)
        for value in details.values()
        if isinstance(value, list)
        for why in value
        if str(why) not in ("Required.",) and str(why) not in exc.message
    ]
    return " ".join([exc.message, *extra])


def _posted[F: forms.Form](request: HttpRequest, form_class: type[F]) -> F | None:
    """The POSTed form when it is valid; otherwise None, its errors told as a message."""
    form = form_class(request.POST)
    if form.is_valid():
        return form
    messages.error(request, _form_errors(form))
    return None


def _tell[T](request: HttpRequest, call: Callable[[], T], ok: Callable[[T], str]) -> T | None:
    """One service call for a page that answers with a redirect: a refusal becomes an error
    message (with its field details) and None, a success the message `ok(result)` and the result."""
    try:
        result = call()
    except ApplicationError as exc:
        messages.error(request, _error_text(exc))
        return None
    messages.success(request, ok(result))
    return result


def _save_form[T](
    request: HttpRequest,
    form: forms.ModelForm,
    fields: Iterable[str],
    save: Callable[[dict[str, Any]], T],
) -> T | None:
    """An edit page's POST: `save` gets the valid form's `fields` and its note; a refusal goes on
    the form (None). None too when nothing valid was posted."""
    if request.method != "POST" or not form.is_valid():
        return None
    values = {f: form.cleaned_data[f] for f in fields}
    values["note"] = form.cleaned_data.get("note", "")
    try:
        return save(values)
    except ApplicationError as exc:
        form.add_error(None, _error_text(exc))
        return None


# --- review queue ---------------------------------------------------------------------------------


def _queue_context() -> dict[str, Any]:
    now = clock.now()
    sla = services.sla_seconds()
    steps = selectors.queue_steps()
    items = [
        {
            "step": s,
            "waited": (now - s.intent_at).total_seconds(),
            "level": selectors.sla_level((now - s.intent_at).total_seconds(), sla),
            "claim_live": s.claim_is_live(now),
            "claim_expired": s.claim_has_expired(now),
            **selectors.item_columns(s),
        }
        for s in steps
    ]
    review_runs = [
        {
            "run": r,
            "waited": (now - r.updated_at).total_seconds(),
            "level": selectors.sla_level((now - r.updated_at).total_seconds(), sla),
        }
        for r in selectors.queue_review_runs()
    ]
    return {
        "nav": "queue",
        "items": items,
        "review_runs": review_runs,
        "sla_minutes": sla // 60,
        "bulk_form": BulkDecideForm(),
        "supervisors": selectors.people_who_decide(),
        "nobody_notified": not services.escalation_reachable(),
    }


@require_GET
@require_perm("browse")
def queue(request: HttpRequest) -> HttpResponse:
    context = _queue_context()
    if _htmx(request):
        return render(request, "review/queue.html#items", context)
    return render(request, "review/queue.html", context)


@require_GET
@require_perm("browse")
def queue_count(request: HttpRequest) -> HttpResponse:
    return HttpResponse(waiting_badge())


def _get_step(run_id: UUID, index: int) -> Step:
    step = (
        Step.objects.select_related("run", "claimed_by").filter(run_id=run_id, index=index).first()
    )
    if step is None:
        raise Http404("No such step.")
    return step


def _item_context(request: HttpRequest, step: Step, **extra: Any) -> dict[str, Any]:
    now = clock.now()
    # every step before it (shown collapsed): a decision may hinge on step 3 of 40
    previous = list(
        Step.objects.filter(run_id=step.run_id, index__lt=step.index)
        .order_by("index")
        .defer("arguments")
    )
    claim_live = step.claim_is_live(now)
    approval = _approval_context(step, request, now)
    approvals = len(approval["given"]) if approval else 0
    key = toolside.key_state(step.idempotency_key) if step.effect == "write" else None
    return {
        "nav": "queue",
        "step": step,
        "run": step.run,
        "previous": previous,
        "key": key,
        "evidence": evidence.step_evidence(step, key),
        "concerns": toolside.concerned_records(step.arguments),
        "waited": (now - step.intent_at).total_seconds(),
        "level": selectors.sla_level(
            (now - step.intent_at).total_seconds(), services.sla_seconds()
        ),
        "claim_live": claim_live,
        "claimed_by_me": claim_live and step.claimed_by_id == request.user.pk,
        # what the open page shows; its poll swaps only when this changes (a note being
        # typed is not wiped every few seconds)
        "seen": f"{step.state}:{step.claimed_by_id or 0}:{int(claim_live)}:{approvals}",
        "can_resolve": request.user.has_perm("review.resolve"),
        "approval": approval,
        "people": selectors.people_who_decide() if request.user.has_perm("review.resolve") else [],
        "form": extra.pop("form", None) or ResolveForm(),
        "resumed_by": selectors.run_resumed_by(step.run) if step.resolution_action else "",
        **extra,
    }


def _approval_context(step: Step, request: HttpRequest, now: Any) -> dict[str, Any] | None:
    """What the approval box shows: who approved, how many are needed, the expiry."""
    approval_request = getattr(step, "approval_request", None)
    if approval_request is None:
        return None
    given = list(approval_request.approvals.all())
    username = request.user.get_username()
    return {
        "request": approval_request,
        "given": given,
        "missing": max(0, approval_request.approvals_required - len(given)),
        "mine": next((a for a in given if a.by == username), None),
        "expires_in": (approval_request.expires_at - now).total_seconds()
        if approval_request.expires_at
        else None,
    }


@require_GET
@require_perm("browse")
def queue_item(request: HttpRequest, run_id: UUID, index: int) -> HttpResponse:
    step = _get_step(run_id, index)
    lookup = None
    if not _htmx(request) and step.state == StepState.UNKNOWN:
        # a tool that can say whether the key took effect settles the item by itself
        lookup = services.review_step_settle_by_lookup(run_id=run_id, index=index)
        if lookup is not None and lookup.state != "no_answer":
            step = _get_step(run_id, index)
    context = _item_context(request, step, lookup=lookup)
    if _htmx(request):
        if request.GET.get("seen") == context["seen"]:
            return HttpResponse(status=204)  # nothing changed: htmx keeps the page as it is
        response = render(request, "review/item.html#decision", context)
        return _stop_polling_if(
            response, step.state not in (StepState.UNKNOWN, StepState.AWAITING_APPROVAL)
        )
    return render(request, "review/item.html", context)


def _item_response(
    request: HttpRequest, step: Step, *, error: str = "", form: Any = None, ok: str = ""
) -> HttpResponse:
    """htmx: the decision partial (with the outcome); otherwise a redirect with a message."""
    if _htmx(request):
        step = _get_step(step.run_id, step.index)
        context = _item_context(request, step, form=form, error=error, ok=ok)
        response = render(
            request, "review/item.html#decision", context, status=200 if not error else 409
        )
        # htmx swaps 4xx only when configured; answer 200 so the message is shown
        response.status_code = 200
        # the nav count and an open queue refresh either way (a refusal means someone else acted)
        return trigger_client_event(response, "queue-changed")
    if error:
        messages.error(request, error)
    if ok:
        messages.success(request, ok)
    return HttpResponseRedirect(reverse("review:item", args=[step.run_id, step.index]))


def queue_item_post[T](
    decide: Callable[..., T],
    ok: Callable[[T], str],
    form_class: type[forms.Form] | None = None,
    *,
    keep_form: bool = False,
) -> View:
    """A supervisor's action on a queue item (POST, review.resolve): its form (if it has one)
    valid, then one service call `decide(user=, run_id=, index=, **the form's fields)`, told as
    `_item_response` tells it. `keep_form`: the posted form is shown again after a refusal (the
    resolve form, the page's one form with typing worth keeping)."""

    @require_POST
    @require_perm("resolve")
    def action(request: HttpRequest, run_id: UUID, index: int) -> HttpResponse:
        step = _get_step(run_id, index)
        form = form_class(request.POST) if form_class is not None else None
        kept = form if keep_form else None
        if form is not None and not form.is_valid():
            return _item_response(request, step, error=_form_errors(form), form=kept)
        fields = form.cleaned_data if form is not None else {}
        try:
            result = decide(user=request.user, run_id=run_id, index=index, **fields)
        except ApplicationError as exc:
            return _item_response(request, step, error=_error_text(exc), form=kept)
        return _item_response(request, step, ok=ok(result))

    return action


RESOLVED_WORDS = {"sent": "marked as sent", "retry": "sent back for retry", "abandon": "abandoned"}


def approved_words(step: Step) -> str:
    if step.state == StepState.AWAITING_APPROVAL:
        return "Your approval is recorded; one more is needed."
    return f"Step {step.index} approved: the agent may run it now."


queue_resolve = queue_item_post(
    lambda confirm_repeat, **decision: services.review_step_resolve(
        confirmed_may_repeat=confirm_repeat, **decision
    ),
    lambda step: f"Step {step.index} {RESOLVED_WORDS[str(step.resolution_action)]}.",
    ResolveForm,
    keep_form=True,
)
queue_assign = queue_item_post(
    services.review_step_assign, lambda step: f"Assigned to {step.claimed_by}.", AssignForm
)
queue_approve = queue_item_post(services.review_step_approve, approved_words, ApproveForm)
queue_deny = queue_item_post(
    services.review_step_deny, lambda step: f"Step {step.index} denied: it will not run.", DenyForm
)
queue_claim = queue_item_post(services.review_step_claim, lambda _: "You claimed this item.")
queue_release = queue_item_post(services.review_step_release, lambda _: "Claim released.")


@require_POST
@require_perm("resolve")
def queue_bulk(request: HttpRequest) -> HttpResponse:
    """One decision for the ticked queue items; back to the queue with what happened."""
    form = _posted(request, BulkDecideForm)
    if form is not None:
        data = form.cleaned_data
        items = data["items"]
        _tell(
            request,
            lambda: services.review_steps_decide(
                user=request.user,  # type: ignore[arg-type]
                items=items,
                action=data["action"],
                note=data["note"],
                confirmed_may_repeat=data["confirm_repeat"],
            ),
            lambda _: (
                f"{len(items)} item{'s' if len(items) != 1 else ''} decided: {data['action']}."
            ),
        )
    return HttpResponseRedirect(reverse("review:queue"))


# --- budget policies and approval rules: settings an admin lists and edits -----------------------


def _settings_list(template: str, name: str, rows: QuerySet[Any]) -> View:
    """A settings list page: every row of `rows` (read afresh on each request) as `name`."""

    @require_GET
    @require_perm("manage_policies")
    def page(request: HttpRequest) -> HttpResponse:
        return render(request, template, {"nav": "policies", name: list(rows.all())})

    return page


def _settings_edit[M: Model](
    form_class: type[AuditedModelForm],
    name: str,
    back: str,
    save: Callable[..., M],
    saved: Callable[[M], str],
    extra: Callable[[], dict[str, Any]] = dict,
) -> View:
    """A setting's new-and-edit page: the form's fields and note go to its service as
    `save(user=, <name>=the stored row or None, values=)`; a refusal stays on the form (400).
    The page is review/<name>_form.html, showing the stored row as `name`."""
    model = form_class._meta.model
    fields = form_class._meta.fields or ()

    @require_http_methods(["GET", "POST"])
    @require_perm("manage_policies")
    def page(request: HttpRequest, pk: int | None = None) -> HttpResponse:
        stored = get_object_or_404(model, pk=pk) if pk else None
        form = form_class(request.POST or None, instance=stored)
        # a fresh copy for the service: validating the form wrote the posted values onto `stored`
        result = _save_form(
            request,
            form,
            fields,
            lambda values: save(
                user=request.user,
                **{name: model.objects.get(pk=pk) if stored else None},
                values=values,
            ),
        )
        if result is not None:
            messages.success(request, saved(result))
            return HttpResponseRedirect(reverse(back))
        context = {"nav": "policies", "form": form, name: stored, **extra()}
        status = 400 if request.method == "POST" else 200
        return render(request, f"review/{name}_form.html", context, status=status)

    return page


policies = _settings_list(
    "review/policies.html", "policies", BudgetPolicy.objects.order_by("-is_default", "name")
)
policy_edit = _settings_edit(
    PolicyForm,
    "policy",
    "review:policies",
    services.budget_policy_save,
    lambda policy: (
        f"Policy “{policy.name}” saved; new runs of "
        + ("agents without a policy of their own" if policy.is_default else "its agent")
        + " use it."
    ),
    # the page says which policy is the default now: ticking the box takes it over
    lambda: {"default_policy": BudgetPolicy.objects.filter(is_default=True).first()},
)


@require_http_methods(["GET", "POST"])
@require_perm("manage_policies")
def policy_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """Deleting asks first and says what follows; a POST without `confirm=yes` asks again."""
    policy = get_object_or_404(BudgetPolicy, pk=pk)
    if request.method == "GET" or request.POST.get("confirm") != "yes":
        return render(request, "review/policy_delete.html", {"nav": "policies", "policy": policy})
    name = _tell(
        request,
        lambda: services.budget_policy_delete(
            user=request.user,  # type: ignore[arg-type]
            policy_id=pk,
            note=request.POST.get("note", ""),
        ),
        lambda name: f"Policy “{name}” deleted; runs keep the limits they copied.",
    )
    if name is None:
        return HttpResponseRedirect(reverse("review:policy_delete", args=[pk]))
    return HttpResponseRedirect(reverse("review:policies"))


approval_rules = _settings_list(
    "review/approval_rules.html",
    "rules",
    ApprovalRule.objects.filter(is_fork_fence=False).order_by("agent", "tool_pattern"),
)
approval_rule_edit = _settings_edit(
    ApprovalRuleForm,
    "rule",
    "review:approval_rules",
    services.approval_rule_save,
    lambda _: "Approval rule saved.",
)


# --- escalation webhooks --------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@require_perm("manage_policies")
def notifications(request: HttpRequest) -> HttpResponse:
    form = WebhookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            services.escalation_webhook_add(
                user=request.user,  # type: ignore[arg-type]
                url=form.cleaned_data["url"],
                secret=form.cleaned_data["secret"],
            )
        except ApplicationError as exc:
            form.add_error("url", exc.message)
        else:
            messages.success(request, "Webhook added: escalations are posted there too.")
            return HttpResponseRedirect(reverse("review:notifications"))
    return render(
        request,
        "review/notifications.html",
        {
            "nav": "policies",
            "form": form,
            "webhooks": selectors.webhooks_with_last_delivery(),
            "reachable": services.escalation_reachable(),
            "supervisors_with_mail": selectors.supervisors_with_mail(),
        },
        status=400 if request.method == "POST" else 200,
    )


@require_POST
@require_perm("manage_policies")
def webhook_active(request: HttpRequest, webhook_id: int) -> HttpResponse:
    """Turn a webhook off (escalations are not posted to it) or on again."""
    active = request.POST.get("active") == "on"
    _tell(
        request,
        lambda: services.escalation_webhook_set_active(
            user=request.user,  # type: ignore[arg-type]
            webhook_id=webhook_id,
            active=active,
        ),
        lambda hook: f"Webhook {hook.url} is {'on' if hook.active else 'off'}.",
    )
    return HttpResponseRedirect(reverse("review:notifications"))


@require_POST
@require_perm("manage_policies")
def webhook_delete(request: HttpRequest, webhook_id: int) -> HttpResponse:
    _tell(
        request,
        lambda: services.escalation_webhook_delete(
            user=request.user,  # type: ignore[arg-type]
            webhook_id=webhook_id,
        ),
        lambda url: f"Webhook {url} removed.",
    )
    return HttpResponseRedirect(reverse("review:notifications"))


@require_POST
@require_perm("manage_policies")
def webhook_test(request: HttpRequest, webhook_id: int) -> HttpResponse:
    """Send a signed test post; the page shows how it went once it is delivered or fails."""
    _tell(
        request,
        lambda: services.escalation_webhook_test(
            user=request.user,  # type: ignore[arg-type]
            webhook_id=webhook_id,
        ),
        lambda delivery: (
            f"Test post queued to {delivery.webhook.url}: reload this page to see it land."
        ),
    )
    return HttpResponseRedirect(reverse("review:notifications"))


# --- worker tokens ------------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@require_perm("manage_tokens")
def tokens(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST or None)
    created: tuple[WorkerToken, str] | None = None
    if request.method == "POST" and form.is_valid():
        try:
            created = services.review_token_create(
                user=request.user,  # type: ignore[arg-type]
                name=form.cleaned_data["name"],
                agents=form.cleaned_data["agents"],
                tools_direct=form.cleaned_data["tools_direct"],
            )
        except ApplicationError as exc:
            form.add_error("name", exc.message)
        else:
            form = TokenForm()
    rows = list(WorkerToken.objects.order_by("name", "-created_at"))
    response = render(
        request,
        "review/tokens.html",
        {"nav": "tokens", "form": form, "tokens": rows, "created": created},
        status=400 if request.method == "POST" and form.errors else 200,
    )
    if created:
        response["Cache-Control"] = "no-store"
    return response


@require_http_methods(["GET", "POST"])
@require_perm("manage_tokens")
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    """Revoking asks first (every worker using the token stops at once); a POST without
    `confirm=yes` shows the same question instead of revoking."""
    if request.method == "GET" or request.POST.get("confirm") != "yes":
        token = get_object_or_404(WorkerToken, pk=token_id)
        return render(request, "review/token_revoke.html", {"nav": "tokens", "token": token})
    try:
        token = services.review_token_revoke(user=request.user, token_id=token_id)  # type: ignore[arg-type]
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Token “{token.name}” ({token.prefix}…) revoked.")
    return HttpResponseRedirect(reverse("review:tokens"))


# --- MCP upstream tools ---------------------------------------------------------------------------


@require_GET
@require_perm("manage_policies")
def mcp_tools(request: HttpRequest) -> HttpResponse:
    """The tools MCP proxies found upstream: the server's hint and the admins' mark on each."""
    rows = list(McpTool.objects.order_by("server", "name"))
    return render(
        request,
        "review/mcp_tools.html",
        {"nav": "mcp_tools", "tools": rows, "marks": McpToolMark.choices},
    )


@require_POST
@require_perm("manage_policies")
def mcp_tool_mark(request: HttpRequest, tool_id: int) -> HttpResponse:
    get_object_or_404(McpTool, pk=tool_id)
    _tell(
        request,
        lambda: services.mcp_tool_mark(
            user=request.user,  # type: ignore[arg-type]
            tool_id=tool_id,
            mark=request.POST.get("mark", ""),
            note=request.POST.get("note", ""),
        ),
        lambda tool: (
            f"{tool.server}/{tool.name} is now treated as a {tool.effect}; "
            "proxies honour it from their next tools/list."
        ),
    )
    return HttpResponseRedirect(reverse("review:mcp_tools"))


# --- audit log ----------------------------------------------------------------------------------

AUDIT_PAGE = 50


@require_GET
@require_perm("view_auditentry")
def audit_log(request: HttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET or None)
    data = form.cleaned_data if form.is_valid() else {}
    qs = AuditEntry.objects.all()
    if data.get("actor"):
        qs = qs.filter(actor_name=data["actor"].strip())
    if data.get("action"):
        qs = qs.filter(action__startswith=data["action"].strip())
    if data.get("target"):
        qs = qs.filter(target__contains=data["target"].strip())
    if data.get("date_from"):
        qs = qs.filter(at__date__gte=data["date_from"])
    if data.get("date_to"):
        qs = qs.filter(at__date__lte=data["date_to"])
    page = data.get("page") or 1
    offset = (page - 1) * AUDIT_PAGE
    rows = list(qs.order_by("-at", "-id")[offset : offset + AUDIT_PAGE + 1])
    context = {
        "nav": "audit",
        "form": form,
        "entries": rows[:AUDIT_PAGE],
        "has_next": len(rows) > AUDIT_PAGE,
        "page": page,
        "query": query_without(request, "page"),
    }
    if _htmx(request):
        return render(request, "review/audit.html#entries", context)
    return render(request, "review/audit.html", context)
