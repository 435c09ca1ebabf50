"""The review desk: the queue of items waiting for a person, an item's page, and its decisions."""

from collections.abc import Callable
from functools import wraps
from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from dashboard.views.common import (
    View,
    error_text,
    form_errors,
    is_htmx,
    person,
    posted,
    render_polled,
    require_perm,
    require_perm_on,
    tell,
)
from review import evidence, selectors, toolside
from review.forms import ApproveForm, AssignForm, BulkDecideForm, DenyForm, ResolveForm
from review.services.claims import review_step_assign, review_step_claim, review_step_release
from review.services.escalations import escalation_reachable, sla_seconds, team_slas
from review.services.resolutions import (
    review_step_approve,
    review_step_deny,
    review_step_resolve,
    review_step_settle_by_lookup,
    review_steps_decide,
)
from review.templatetags.review import waiting_badge
from runs import clock
from runs.api_errors import ApplicationError
from runs.constants import StepState
from runs.models import Step


def _queue_context() -> dict[str, Any]:
    now = clock.now()
    sla = sla_seconds()
    slas = team_slas()  # each item is coloured by its own team's SLA
    steps = selectors.queue_steps()
    items = [
        {
            "step": s,
            "waited": (now - s.intent_at).total_seconds(),
            "level": selectors.sla_level(
                (now - s.intent_at).total_seconds(), slas.get(s.team_id, sla)
            ),
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
            "level": selectors.sla_level(
                (now - r.updated_at).total_seconds(), slas.get(r.team_id, sla)
            ),
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
        "nobody_notified": not escalation_reachable(),
    }


@require_GET
@require_perm("browse")
def queue(request: HttpRequest) -> HttpResponse:
    context = _queue_context()
    if is_htmx(request):
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
            (now - step.intent_at).total_seconds(), team_slas().get(step.team_id, sla_seconds())
        ),
        "claim_live": claim_live,
        "claimed_by_me": claim_live and step.claimed_by_id == request.user.pk,
        # what the open page shows; its poll swaps only when this changes (a note being
        # typed is not wiped every few seconds)
        "seen": f"{step.state}:{step.claimed_by_id or 0}:{int(claim_live)}:{approvals}",
        "can_resolve": request.user.has_perm("review.resolve", step),
        "approval": approval,
        "people": selectors.people_who_decide(step.team_id)
        if request.user.has_perm("review.resolve", step)
        else [],
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
    if not is_htmx(request) and step.state == StepState.UNKNOWN:
        # a tool that can say whether the key took effect settles the item by itself
        lookup = review_step_settle_by_lookup(run_id=run_id, index=index)
        if lookup is not None and lookup.state != "no_answer":
            step = _get_step(run_id, index)
    context = _item_context(request, step, lookup=lookup)
    if is_htmx(request):
        if request.GET.get("seen") == context["seen"]:
            return HttpResponse(status=204)  # nothing changed: htmx keeps the page as it is
        decided = step.state not in (StepState.UNKNOWN, StepState.AWAITING_APPROVAL)
        return render_polled(request, "review/item.html#decision", context, stop=decided)
    return render(request, "review/item.html", context)


def _item_response(
    request: HttpRequest,
    step: Step,
    *,
    error: str = "",
    form: Any = None,
    ok: str = "",
    claim_refused: bool = False,
) -> HttpResponse:
    """htmx: the decision partial (with the outcome); otherwise a redirect with a message.
    `claim_refused`: the partial's own line about the claim is the refusal (no second one)."""
    if is_htmx(request):
        step = _get_step(step.run_id, step.index)
        context = _item_context(request, step, form=form, error=error, ok=ok)
        context["claim_refused"] = claim_refused
        # a refusal is a 409 that the page swaps in (base.html's htmx responseHandling)
        response = render(
            request, "review/item.html#decision", context, status=409 if error else 200
        )
        # the nav count and an open queue refresh either way (a refusal means someone else acted)
        return trigger_client_event(response, "queue-changed")
    if error:
        messages.error(request, error)
    if ok:
        messages.success(request, ok)
    return HttpResponseRedirect(reverse("review:item", args=[step.run_id, step.index]))


def queue_item_action[F: forms.Form](
    form_class: type[F] | None = None, *, keep_form: bool = False
) -> Callable[[Callable[[HttpRequest, Step, dict[str, Any]], str]], View]:
    """Makes a supervisor's action on a queue item (POST, review.resolve) of a function that calls
    one service with the step and its form's valid fields and returns what to tell the person;
    a refusal, or the form's errors, is told instead, as `_item_response` tells it. `keep_form`:
    the posted form is shown again after a refusal (the resolve form, the page's one form with
    typing worth keeping). The view keeps the function's name, so a search for it finds it."""

    def decorate(decide: Callable[[HttpRequest, Step, dict[str, Any]], str]) -> View:
        @require_POST
        @require_perm("resolve")
        @wraps(decide)
        def view(request: HttpRequest, run_id: UUID, index: int) -> HttpResponse:
            step = _get_step(run_id, index)
            require_perm_on(request, "resolve", step)  # in the item's team (404 if unseen)
            form = form_class(request.POST) if form_class is not None else None
            kept = form if keep_form else None
            if form is not None and not form.is_valid():
                return _item_response(request, step, error=form_errors(form), form=kept)
            fields = form.cleaned_data if form is not None else {}
            try:
                said = decide(request, step, fields)
            except ApplicationError as exc:
                if exc.code == "claimed" and step.state == StepState.UNKNOWN and is_htmx(request):
                    # the decision box says who holds the claim until when: said once, there
                    return _item_response(request, step, form=kept, claim_refused=True)
                return _item_response(request, step, error=error_text(exc), form=kept)
            return _item_response(request, step, ok=said)

        return view

    return decorate


RESOLVED_WORDS = {"sent": "marked as sent", "retry": "sent back for retry", "abandon": "abandoned"}


def _decided_by(request: HttpRequest, step: Step) -> dict[str, Any]:
    """Who decides which item: the keyword arguments every desk service starts with."""
    return {"user": person(request), "run_id": step.run_id, "index": step.index}


@queue_item_action(ResolveForm, keep_form=True)
def queue_resolve(request: HttpRequest, step: Step, fields: dict[str, Any]) -> str:
    """Resolve an unknown item as sent, retry or abandon (a risky retry needs its confirmation)."""
    resolved = review_step_resolve(
        **_decided_by(request, step),
        action=fields["action"],
        note=fields["note"],
        result=fields["result"],
        confirmed_may_repeat=fields["confirm_repeat"],
    )
    return f"Step {resolved.index} {RESOLVED_WORDS[str(resolved.resolution_action)]}."


@queue_item_action()
def queue_claim(request: HttpRequest, step: Step, fields: dict[str, Any]) -> str:
    """Claim the item for a while, so the other supervisors see who is working on it."""
    review_step_claim(**_decided_by(request, step))
    return "You claimed this item."


@queue_item_action()
def queue_release(request: HttpRequest, step: Step, fields: dict[str, Any]) -> str:
    """Give up one's own claim on the item."""
    review_step_release(**_decided_by(request, step))
    return "Claim released."


@queue_item_action(ApproveForm)
def queue_approve(request: HttpRequest, step: Step, fields: dict[str, Any]) -> str:
    """One person's approval of a step waiting for it; a rule may ask for more than one."""
    approved = review_step_approve(**_decided_by(request, step), note=fields["note"])
    if approved.state == StepState.AWAITING_APPROVAL:
        return "Your approval is recorded; one more is needed."
    return f"Step {approved.index} approved: the agent may run it now."


@queue_item_action(DenyForm)
def queue_deny(request: HttpRequest, step: Step, fields: dict[str, Any]) -> str:
    """Deny a step waiting for approval: it will not run, and the agent is told so."""
    denied = review_step_deny(**_decided_by(request, step), note=fields["note"])
    return f"Step {denied.index} denied: it will not run."


@queue_item_action(AssignForm)
def queue_assign(request: HttpRequest, step: Step, fields: dict[str, Any]) -> str:
    """Give the item to a person who may decide it (a claim in their name)."""
    assigned = review_step_assign(**_decided_by(request, step), assignee=fields["assignee"])
    return f"Assigned to {assigned.claimed_by}."


@require_POST
@require_perm("resolve")
def queue_bulk(request: HttpRequest) -> HttpResponse:
    """One decision for the ticked queue items; back to the queue with what happened."""
    form = posted(request, BulkDecideForm)
    if form is not None:
        data = form.cleaned_data
        items = data["items"]
        tell(
            request,
            lambda: review_steps_decide(
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
