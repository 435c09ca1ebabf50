"""Settings an admin lists and edits: budget policies and approval rules."""

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.db.models import Model
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from dashboard.views.common import person, require_home_team, require_perm, save_form, tell
from review.forms import ApprovalRuleForm, AuditedModelForm, PolicyForm
from review.services.policies import approval_rule_save, budget_policy_delete, budget_policy_save
from runs.api_errors import ApplicationError
from runs.models import ApprovalRule, BudgetPolicy
from teams.scope import home_team_id


def _setting_page[M: Model](
    request: HttpRequest,
    pk: int | None,
    form_class: type[AuditedModelForm],
    name: str,
    *,
    back: str,
    save: Callable[..., M],
    saved: Callable[[M], str],
    extra: dict[str, Any] | None = None,
) -> HttpResponse:
    """A setting's new-and-edit page: the form's fields and note go to its service as
    `save(user=, <name>=the stored row or None, values=)`; a refusal stays on the form (400),
    a success goes `back` with the message `saved(row)`. The page is review/<name>_form.html,
    showing the stored row as `name`."""
    model = form_class._meta.model
    stored = get_object_or_404(model, pk=pk) if pk else None
    form = form_class(request.POST or None, instance=stored)
    if stored is None and request.method == "POST":
        try:
            require_home_team(request)  # a new row goes to the switched team
        except ApplicationError as exc:
            form.add_error(None, exc.message)
    # a fresh copy for the service: validating the form wrote the posted values onto `stored`
    result = save_form(
        request,
        form,
        form_class._meta.fields or (),
        lambda values: save(
            user=person(request),
            **{name: model.objects.get(pk=pk) if stored else None},
            values=values,
        ),
    )
    if result is not None and not form.errors:
        messages.success(request, saved(result))
        return HttpResponseRedirect(reverse(back))
    nav = "approval_rules" if name == "rule" else "policies"
    context = {"nav": nav, "form": form, name: stored, **(extra or {})}
    status = 400 if request.method == "POST" else 200
    return render(request, f"review/{name}_form.html", context, status=status)


@require_GET
@require_perm("manage_policies", narrow=True)
def policies(request: HttpRequest) -> HttpResponse:
    """Every budget policy, the default first."""
    rows = list(BudgetPolicy.objects.order_by("-is_default", "name"))
    return render(request, "review/policies.html", {"nav": "policies", "policies": rows})


def _policy_saved(policy: BudgetPolicy) -> str:
    users = "agents without a policy of their own" if policy.is_default else "its agent"
    return f"Policy “{policy.name}” saved; new runs of {users} use it."


@require_http_methods(["GET", "POST"])
@require_perm("manage_policies", narrow=True)
def policy_edit(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    """A budget policy's new-and-edit page. It says which policy is the default now: ticking
    the box takes the flag over."""
    team = home_team_id()
    default = BudgetPolicy.objects.filter(is_default=True, team_id=team).first() if team else None
    return _setting_page(
        request,
        pk,
        PolicyForm,
        "policy",
        back="review:policies",
        save=budget_policy_save,
        saved=_policy_saved,
        extra={"default_policy": default},
    )


@require_http_methods(["GET", "POST"])
@require_perm("manage_policies", narrow=True)
def policy_delete(request: HttpRequest, pk: int) -> HttpResponse:
    """Deleting asks first and says what follows; a POST without `confirm=yes` asks again."""
    policy = get_object_or_404(BudgetPolicy, pk=pk)
    if request.method == "GET" or request.POST.get("confirm") != "yes":
        return render(request, "review/policy_delete.html", {"nav": "policies", "policy": policy})
    name = tell(
        request,
        lambda: budget_policy_delete(
            user=person(request), policy_id=pk, note=request.POST.get("note", "")
        ),
        lambda name: f"Policy “{name}” deleted; runs keep the limits they copied.",
    )
    if name is None:
        return HttpResponseRedirect(reverse("review:policy_delete", args=[pk]))
    return HttpResponseRedirect(reverse("review:policies"))


@require_GET
@require_perm("manage_policies", narrow=True)
def approval_rules(request: HttpRequest) -> HttpResponse:
    """Every approval rule an admin wrote (not the fence that holds forks' writes)."""
    rows = ApprovalRule.objects.filter(is_fork_fence=False).order_by("agent", "tool_pattern")
    return render(
        request, "review/approval_rules.html", {"nav": "approval_rules", "rules": list(rows)}
    )


@require_http_methods(["GET", "POST"])
@require_perm("manage_policies", narrow=True)
def approval_rule_edit(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    """An approval rule's new-and-edit page."""
    return _setting_page(
        request,
        pk,
        ApprovalRuleForm,
        "rule",
        back="review:approval_rules",
        save=approval_rule_save,
        saved=lambda _: "Approval rule saved.",
    )
