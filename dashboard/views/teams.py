"""The header's team switch: a person in several teams works in one of them, or in all of them
at once ("all my teams": the pages that list runs show every team's, each with its team)."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from dashboard.views.common import require_perm, require_perm_on
from review.services.escalations import sla_seconds
from runs.models import Run
from teams.middleware import ALL_TEAMS, SESSION_TEAM
from teams.models import Membership, Team
from teams.scope import every_team, home_team_id
from teams.services import roles_of, team_create, team_queue_settings_set


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


class QueueSettingsForm(forms.Form):
    review_sla_minutes = forms.IntegerField(
        required=False,
        min_value=1,
        label="Queue SLA (minutes)",
        help_text="How long an item may wait before it is escalated; empty: the ledger's default.",
    )
    escalation_email = forms.EmailField(
        required=False,
        label="Escalation address",
        help_text="Where escalations are mailed; empty: the team's supervisors.",
    )


@require_http_methods(["GET", "POST"])
@require_perm("manage_policies", narrow=True)
def team_settings(request: HttpRequest) -> HttpResponse:
    """The switched team's queue settings, for its admins: its SLA and escalation address."""
    home = home_team_id()
    team = Team.objects.filter(pk=home).first() if home is not None else None
    if team is None:
        messages.error(request, "You see several teams: choose the team in the header first.")
        return render(request, "dashboard/team_settings.html", {"nav": "notifications"})
    require_perm_on(request, "manage_policies", Membership(team=team))
    initial = {
        "review_sla_minutes": team.review_sla_minutes,
        "escalation_email": team.escalation_email,
    }
    form = QueueSettingsForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        team_queue_settings_set(
            team=team,
            review_sla_minutes=form.cleaned_data["review_sla_minutes"],
            escalation_email=form.cleaned_data["escalation_email"] or "",
            actor=request.user,
        )
        messages.success(request, f"Team {team.slug}'s queue settings saved.")
        return HttpResponseRedirect(reverse("review:team_settings"))
    context = {
        "nav": "notifications",
        "team": team,
        "form": form,
        "default_sla_minutes": sla_seconds() // 60,
    }
    return render(
        request,
        "dashboard/team_settings.html",
        context,
        status=400 if request.method == "POST" else 200,
    )
