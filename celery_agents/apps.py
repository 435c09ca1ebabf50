from typing import Any

from django.apps import AppConfig


class CeleryAgentsConfig(AppConfig):
    name = "celery_agents"
    verbose_name = "Celery-run agents"

    def ready(self) -> None:
        from runs.signals import run_resumable

        run_resumable.connect(redispatch_resumable_run, dispatch_uid="celery_agents.redispatch")


def redispatch_resumable_run(*, run_id: Any, agent: str, reason: str = "", **_: Any) -> None:
    """A run the reaper interrupted or a review resumed goes back on the queue (after commit)."""
    from celery_agents.registry import is_registered

    if not is_registered(agent):
        return
    from celery_agents.tasks import run_agent

    run_agent.delay_on_commit(str(run_id), agent)  # type: ignore[attr-defined]
