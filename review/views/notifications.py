"""Escalation webhooks: the notifications page, switching, removing and testing a webhook."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from dashboard.views.common import page_action, person, require_home_team, require_perm
from review import selectors
from review.forms import WebhookForm
from review.services.escalations import escalation_reachable
from review.services.webhooks import (
    escalation_webhook_add,
    escalation_webhook_delete,
    escalation_webhook_set_active,
    escalation_webhook_test,
)
from runs.api_errors import ApplicationError


@require_http_methods(["GET", "POST"])
@require_perm("manage_policies", narrow=True)
def notifications(request: HttpRequest) -> HttpResponse:
    form = WebhookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            require_home_team(request)  # a new webhook goes to the switched team
            escalation_webhook_add(
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
            "nav": "notifications",
            "form": form,
            "webhooks": selectors.webhooks_with_last_delivery(),
            "reachable": escalation_reachable(),
            "supervisors_with_mail": selectors.supervisors_with_mail(),
        },
        status=400 if request.method == "POST" else 200,
    )


@page_action("manage_policies", back="review:notifications")
def webhook_active(request: HttpRequest, webhook_id: int) -> str:
    """Turn a webhook off (escalations are not posted to it) or on again."""
    active = request.POST.get("active") == "on"
    hook = escalation_webhook_set_active(user=person(request), webhook_id=webhook_id, active=active)
    return f"Webhook {hook.url} is {'on' if hook.active else 'off'}."


@page_action("manage_policies", back="review:notifications")
def webhook_delete(request: HttpRequest, webhook_id: int) -> str:
    """Remove a webhook; its undelivered posts are dropped with it."""
    return (
        f"Webhook {escalation_webhook_delete(user=person(request), webhook_id=webhook_id)} removed."
    )


@page_action("manage_policies", back="review:notifications")
def webhook_test(request: HttpRequest, webhook_id: int) -> str:
    """Send a signed test post; the page shows how it went once it is delivered or fails."""
    delivery = escalation_webhook_test(user=person(request), webhook_id=webhook_id)
    return f"Test post queued to {delivery.webhook.url}: reload this page to see it land."
