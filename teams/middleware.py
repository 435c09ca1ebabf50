"""The dashboard's scope: a signed-in person sees the teams they hold a role in; an org admin
(superuser) every team; anyone else none (teams.scope). Worker calls (a Bearer token) get their
token's team from the authentication (runs.authentication)."""

from collections.abc import Callable, Iterator
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from teams import scope
from teams.models import DEFAULT_TEAM_SLUG, Team
from teams.services import roles_of

# the session key of the team the person chose in the header's team switch (a team id); absent
# (or ALL_TEAMS): every team the person holds a role in ("all my teams")
SESSION_TEAM = "teams.current"
ALL_TEAMS = "all"


def teams_of_person(user: Any) -> list[Team]:
    """The teams a person may switch to: those they hold a role in; an org admin (superuser):
    every team."""
    if user is None or not user.is_authenticated or not user.is_active:
        return []
    if user.is_superuser:
        return list(Team.objects.order_by("slug"))
    held = roles_of(user)
    if len(held) < 2:  # no switch to show: spare the query
        return [Team(pk=pk) for pk in held]
    return list(Team.objects.filter(pk__in=held).order_by("slug"))


def scope_of_person(request: HttpRequest) -> scope.Scope:
    """The dashboard's scope: the one team the person switched to, else every team they hold a
    role in (an org admin: every team). New top-level rows go to the switched team; with every
    team in sight, to the person's only team, else `default` if they are in it, else none (a
    page that creates asks them to switch first)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not user.is_active:
        return scope.NONE
    chosen = request.session.get(SESSION_TEAM) if hasattr(request, "session") else None
    if user.is_superuser:
        if isinstance(chosen, int) and Team.objects.filter(pk=chosen).exists():
            return scope.scope_for_teams([chosen])
        return scope.every_team_scope("org admin", home=_default_team_id())
    teams = sorted(roles_of(user))
    if not teams:
        return scope.NONE
    if isinstance(chosen, int) and chosen in teams:
        return scope.scope_for_teams([chosen])
    if len(teams) == 1:
        home: int | None = teams[0]
    else:
        default = _default_team_id()
        home = default if default in teams else None
    return scope.scope_for_teams(teams, home=home)


def _default_team_id() -> int | None:
    return Team.objects.filter(slug=DEFAULT_TEAM_SLUG).values_list("id", flat=True).first()


class TeamScopeMiddleware:
    """Runs each request (and a streamed response's body) under the person's scope."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[..., Any]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if iscoroutinefunction(self):
            return self.__acall__(request)
        with scope.using(scope_of_person(request)):
            response = self.get_response(request)
            final = scope.current()  # the worker's, when the authentication named its team
        return _streamed_under(response, final)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        person = await sync_to_async(scope_of_person)(request)
        with scope.using(person):
            response = await self.get_response(request)
        return response


def _streamed_under(response: Any, person: scope.Scope) -> Any:
    """A streamed body is read after the view returned: each chunk is made under the scope the
    request ran under (the worker's, if the authentication named one)."""
    if not isinstance(response, StreamingHttpResponse) or response.is_async:
        return response
    body = response.streaming_content

    def under_scope() -> Iterator[Any]:
        iterator = iter(body)  # type: ignore[arg-type]  # a sync response's (is_async above)
        while True:
            with scope.using(person):
                try:
                    chunk = next(iterator)
                except StopIteration:
                    return
            yield chunk

    response.streaming_content = under_scope()
    return response
