"""The header's team switch: a person in several teams works in one of them, or in all of them
at once ("all my teams": the pages that list runs show every team's, each with its team)."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from teams.middleware import ALL_TEAMS, SESSION_TEAM
from teams.models import Team
from teams.services import roles_of


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
