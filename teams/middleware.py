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

# the session key of the team a person's new rows go to (the header's team switch sets it)
SESSION_TEAM = "teams.current"


def scope_of_person(request: HttpRequest) -> scope.Scope:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not user.is_active:
        return scope.NONE
    chosen = request.session.get(SESSION_TEAM) if hasattr(request, "session") else None
    if user.is_superuser:
        home = chosen if isinstance(chosen, int) else _default_team_id()
        return scope.every_team_scope("org admin", home=home)
    teams = sorted(roles_of(user))
    if not teams:
        return scope.NONE
    if isinstance(chosen, int) and chosen in teams:
        home = chosen
    elif len(teams) == 1:
        home = teams[0]
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
