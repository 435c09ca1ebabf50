"""The people page (admins): who may sign in, their groups, local accounts, deactivation.

A provider user's groups come from the identity provider at each sign-in (sso/); the page shows
which people are the provider's. Its URL names are `sso:people…`, the names the page had when it
lived in sso/ (dashboard/urls.py).
"""

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard.forms import GroupsForm, LocalUserForm
from dashboard.roles import GROUP_PERMISSIONS
from dashboard.services import people as services
from dashboard.views.common import page_action, require_perm, require_perm_on, tell
from sso.conf import local_login_enabled, sso_settings
from sso.models import OidcIdentity
from teams import scope
from teams.models import Membership, Role, Team, default_team


def _people_rows() -> list[dict[str, Any]]:
    users = services.people_in_sight().prefetch_related("groups").order_by("username")
    identities = {i.user_id: i for i in OidcIdentity.objects.all()}
    # the roles in the teams the viewer manages people of (row-level security hides the rest)
    by_user: dict[int, dict[str, list[str]]] = {}
    for m in Membership.objects.select_related("team").order_by("team__slug", "role"):
        by_user.setdefault(m.user_id, {}).setdefault(m.team.slug, []).append(m.role)
    return [
        {
            "user": u,
            "groups": sorted(g.name for g in u.groups.all()),
            "identity": identities.get(u.pk),
            "team_roles": sorted(by_user.get(u.pk, {}).items()),
        }
        for u in users
    ]


def _managed_teams(request: HttpRequest) -> list[Team]:
    """The teams whose roles the viewer grants: those the page's scope sees (narrowed to where
    they hold manage_people; an org admin: every team, or the one switched to)."""
    now = scope.current()
    return [t for t in Team.objects.order_by("slug") if now.sees(t.pk)]


@require_GET
@require_perm("manage_people", narrow=True)
def people(request: HttpRequest) -> HttpResponse:
    conf = sso_settings()
    context = {
        "nav": "people",
        "rows": _people_rows(),
        "managed_teams": _managed_teams(request),
        "roles": Role.values,
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
    if data["groups"]:  # the groups stand for roles in `default`
        require_perm_on(request, "manage_people", Membership(team=default_team()))
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
    require_perm_on(request, "manage_people", Membership(team=default_team()))  # default's roles
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
def people_role(request: HttpRequest, user_id: int) -> str:
    """Grant or revoke one role in one team: only in a team where the viewer manages people (an
    unseen team is a 404, a seen one without the role a 403)."""
    team = Team.objects.filter(slug=request.POST.get("team", "")).first()
    if team is None or not scope.current().sees(team.pk):
        raise Http404("No such team.")
    require_perm_on(request, "manage_people", Membership(team=team))
    role, grant = request.POST.get("role", ""), request.POST.get("change") != "revoke"
    changed = services.people_role_change(
        actor=request.user,  # type: ignore[arg-type]
        user_id=user_id,
        team=team,
        role=role,
        grant=grant,
    )
    verb = "granted" if grant else "revoked"
    return f"{role} in {team.slug} {verb}." if changed else "Nothing to change."


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
