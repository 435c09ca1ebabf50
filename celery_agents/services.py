"""Starting agent runs on the Celery workers (Django side; the agents themselves are Django-free)."""

from typing import Any

from django.db import transaction

from celery_agents.registry import is_registered
from runs.constants import RunRunner
from runs.models import Run
from runs.services.creation import run_create


@transaction.atomic
def agent_run_start(
    *, agent: str, input: Any, external_id: str | None = None, actor: str
) -> tuple[Run, bool]:
    """Create (or attach to) a run and queue it for a worker once the transaction commits.

    The same (agent, external_id) attaches to the existing run; it is queued again only when it
    never started (a run already under way is re-dispatched by the reaper when its lease lapses),
    and never when another process runs it (runner `external`: it resumes only there).
    """
    if not is_registered(agent):
        raise LookupError(f"no agent {agent!r} is registered")
    from celery_agents.tasks import run_agent

    run, created = run_create(
        agent=agent, input=input, external_id=external_id, actor=actor, runner=RunRunner.CELERY
    )
    if run.runner == RunRunner.CELERY and (created or run.status == "pending"):
        run_agent.delay_on_commit(str(run.pk), agent)  # type: ignore[attr-defined]
    return run, created
