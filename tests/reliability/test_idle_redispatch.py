"""The safety net behind lost dispatches: runs nobody works on are offered again, once a period."""

from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from runs import clock
from runs.models import Run
from runs.services.enforcement import runs_redispatch_idle
from runs.signals import run_resumable
from tests.runs.journal_client import JournalClient


@pytest.fixture
def offered() -> Any:
    seen: list[tuple[str, str, str]] = []

    def receiver(*, run_id: Any, agent: str, reason: str, **_: Any) -> None:
        seen.append((str(run_id), agent, reason))

    run_resumable.connect(receiver, dispatch_uid="test-idle-redispatch")
    yield seen
    run_resumable.disconnect(dispatch_uid="test-idle-redispatch")


def _age(run_id: str, seconds: int) -> None:
    Run.objects.filter(pk=run_id).update(updated_at=clock.now() - timedelta(seconds=seconds))


def test_a_pending_run_whose_task_was_lost_is_offered_again_once_per_period(
    api: APIClient, offered: list[Any]
) -> None:
    journal = JournalClient(api)
    lost = journal.create(agent="support", external_id="lost-task")["id"]
    fresh = journal.create(agent="support", external_id="fresh")["id"]
    working = journal.create(agent="support", external_id="working")["id"]
    external = journal.create(agent="support", external_id="my-own-process")["id"]
    # what start_agent_run makes: runs the agents' Celery task runs
    Run.objects.exclude(pk=external).update(runner="celery")
    assert journal.lease(working).status_code == 200
    for run_id in (lost, working, external):
        _age(run_id, 600)

    assert runs_redispatch_idle(idle_seconds=300) == 1
    assert offered == [(lost, "support", "idle")]
    # offered once: not again until it has been idle for another period
    assert runs_redispatch_idle(idle_seconds=300) == 0
    _age(lost, 301)
    assert runs_redispatch_idle(idle_seconds=300) == 1
    assert [o[0] for o in offered] == [lost, lost]
    assert fresh not in [o[0] for o in offered]
    assert external not in [o[0] for o in offered]  # resumed only by its own process
    assert Run.objects.get(pk=lost).status == "pending"  # an offer changes no state
    assert Run.objects.get(pk=lost).event_seq == 1
