"""Which runs a worker token may see and write: scoped tokens see only their agents' runs.

A token limited to agents (`WorkerToken.agents`) gets 404 for any other run, exactly as if the
run did not exist, and never sees another agent's keys or stored tool responses. An unscoped
token (every token made before scoping existed) sees all runs and costs nothing here.

A run's agent never changes, so the lookup is cached per process (bounded).
"""

from typing import Any
from uuid import UUID

from django.db.models import QuerySet

from runs.api_errors import ApplicationError
from runs.authentication import WorkerPrincipal
from runs.models import Run

_agents: dict[str, str] = {}
_CACHE_LIMIT = 50_000


def run_agent(run_id: UUID | str) -> str | None:
    """The agent of a run (None: no such run); cached, as it never changes."""
    key = str(run_id)
    agent = _agents.get(key)
    if agent is None:
        agent = Run.objects.filter(pk=key).values_list("agent", flat=True).first()
        if agent is None:
            return None
        if len(_agents) >= _CACHE_LIMIT:
            _agents.clear()
        _agents[key] = agent
    return agent


def not_found(run_id: UUID | str) -> ApplicationError:
    return ApplicationError("not_found", f"No run {run_id}.", status_code=404)


def run_check_visible(*, principal: Any, run_id: UUID | str) -> None:
    """404 `not_found` unless the token may use the run (unscoped tokens: no query at all)."""
    if not isinstance(principal, WorkerPrincipal) or principal.agents is None:
        return
    agent = run_agent(run_id)
    if agent is None or not principal.may_use(agent):
        raise not_found(run_id)


def agent_check_allowed(*, principal: Any, agent: str) -> None:
    """A scoped token creates runs only for its own agents."""
    if isinstance(principal, WorkerPrincipal) and not principal.may_use(agent):
        raise ApplicationError(
            "agent_not_allowed",
            f"This token is limited to other agents than {agent!r}.",
            status_code=403,
            details={"agent": agent},
        )


def runs_visible(*, principal: Any, runs: QuerySet[Run]) -> QuerySet[Run]:
    if isinstance(principal, WorkerPrincipal) and principal.agents is not None:
        return runs.filter(agent__in=sorted(principal.agents))
    return runs


__all__ = ["agent_check_allowed", "run_agent", "run_check_visible", "runs_visible"]
