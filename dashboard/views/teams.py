"""The header's team switch: a person in several teams works in one of them, or in all of them
at once ("all my teams": the pages that list runs show every team's, each with its team)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from runs.models import Run
from teams.middleware import ALL_TEAMS, SESSION_TEAM
from teams.models import Membership, Team
from teams.scope import every_team
from teams.services import roles_of, team_create


def is_org_admin(user: object) -> bool:
    """An org admin manages teams and every team's people: a superuser (docs/teams.md)."""
    return bool(getattr(user, "is_superuser", False) and getattr(user, "is_active", False))


@require_POST
@login_required
def team_switch(request: HttpRequest) -> HttpResponse:
    """Work in the posted team (`team`: its slug, or `all`); a team the person holds no role in
    is answered as if it did not exist (404). Back to `next` (this site's), else the runs."""
    wanted = request.POST.get("team", "")
    if wanted == ALL_TEAMS:
        request.session.pop(SESSION_TEAM, None)
    else:
        team = Team.objects.filter(slug=wanted).first()
        user = request.user
        if team is None or not (user.is_superuser or team.pk in roles_of(user)):
            raise Http404("No such team.")
        request.session[SESSION_TEAM] = team.pk
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        back = reverse("review:runs")
    return HttpResponseRedirect(back)


@require_http_methods(["GET", "POST"])
@login_required
def teams_page(request: HttpRequest) -> HttpResponse:
    """The org admin's teams: each with its people and runs counted, and a new team (audited in
    it, with its default budget policy: teams.services.team_create)."""
    if not is_org_admin(request.user):
        raise PermissionDenied("Teams are managed by org admins.")
    status = 200
    if request.method == "POST":
        slug = request.POST.get("slug", "").strip()
        try:
            team = team_create(
                slug=slug, name=request.POST.get("name", "").strip(), actor=request.user
            )
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
            status = 400
        else:
            messages.success(request, f"Team {team.slug} created, with its default budget policy.")
            return HttpResponseRedirect(reverse("review:teams"))
    with every_team("org admin"):
        people = dict(
            Membership.objects.values_list("team_id").annotate(n=Count("user_id", distinct=True))
        )
        runs = dict(Run.objects.values_list("team_id").annotate(n=Count("id")).order_by())
        rows = [
            {"team": t, "people": people.get(t.pk, 0), "runs": runs.get(t.pk, 0)}
            for t in Team.objects.order_by("slug")
        ]
    return render(request, "dashboard/teams.html", {"nav": "teams", "rows": rows}, status=status)
