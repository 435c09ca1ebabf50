"""The people page (admins): who may sign in, their groups, local accounts, deactivation.

A provider user's groups come from the identity provider at each sign-in (sso/); the page shows
which people are the provider's. Its URL names are `sso:people…`, the names the page had when it
lived in sso/ (dashboard/urls.py).
"""

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard.forms import GroupsForm, LocalUserForm
from dashboard.roles import GROUP_PERMISSIONS
from dashboard.services import people as services
from dashboard.views.common import page_action, require_perm, tell
from sso.conf import local_login_enabled, sso_settings
from sso.models import OidcIdentity


def _people_rows() -> list[dict[str, Any]]:
    users = services.people_in_sight().prefetch_related("groups").order_by("username")
    identities = {i.user_id: i for i in OidcIdentity.objects.all()}
    return [
        {
            "user": u,
            "groups": sorted(g.name for g in u.groups.all()),
            "identity": identities.get(u.pk),
        }
        for u in users
    ]


@require_GET
@require_perm("manage_people")
def people(request: HttpRequest) -> HttpResponse:
    conf = sso_settings()
    context = {
        "nav": "people",
        "rows": _people_rows(),
        "form": LocalUserForm(),
        "group_names": list(GROUP_PERMISSIONS),
        "provider_name": conf.provider_name if conf else "",
        "local_login": local_login_enabled(),
    }
    return render(request, "dashboard/people.html", context)


def _back() -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("sso:people"))


@require_POST
@require_perm("manage_people")
def people_create(request: HttpRequest) -> HttpResponse:
    form = LocalUserForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(str(e) for errs in form.errors.values() for e in errs))
        return _back()
    data = form.cleaned_data
    tell(
        request,
        lambda: services.people_local_create(
            actor=request.user,  # type: ignore[arg-type]
            username=data["username"],
            email=data["email"] or "",
            password=data["password"],
            groups=data["groups"],
        ),
        lambda user: f"Local user {user.username} created.",
    )
    return _back()


@require_POST
@require_perm("manage_people")
def people_groups(request: HttpRequest, user_id: int) -> HttpResponse:
    form = GroupsForm(request.POST)
    if form.is_valid():
        tell(
            request,
            lambda: services.people_groups_set(
                actor=request.user,  # type: ignore[arg-type]
                user_id=user_id,
                groups=form.cleaned_data["groups"],
            ),
            lambda user: f"{user.username}'s groups saved.",
        )
    return _back()


@page_action("manage_people", back="sso:people")
def people_deactivate(request: HttpRequest, user_id: int) -> str:
    """Deactivate a person: they cannot sign in, and their sessions end now."""
    user, sessions = services.people_deactivate(actor=request.user, user_id=user_id)  # type: ignore[arg-type]
    return f"{user.username} deactivated; {sessions} session(s) ended."


@page_action("manage_people", back="sso:people")
def people_reactivate(request: HttpRequest, user_id: int) -> str:
    """Let a deactivated person sign in again (their groups are as they were)."""
    user = services.people_reactivate(actor=request.user, user_id=user_id)  # type: ignore[arg-type]
    return f"{user.username} can sign in again."
