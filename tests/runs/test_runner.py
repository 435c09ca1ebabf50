"""Who runs a run: only `celery` runs are offered to the Celery workers; `external` runs are
resumed by their own process (the README's SDK example is never taken over by a registered agent)."""

from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from celery_agents.services import agent_run_start
from runs.models import Event, Run
from runs.services.creation import run_create
from runs.services.enforcement import (
    run_runner_claim_for_celery,
    runs_reap_expired_leases,
    runs_redispatch_idle,
)
from runs.services.leases import run_lease_acquire
from runs.signals import run_resumable
from tests.conftest import FakeClock

pytestmark = pytest.mark.django_db(transaction=True)  # on_commit offers must fire


@pytest.fixture
def offered() -> Iterator[list[tuple[str, str]]]:
    seen: list[tuple[str, str]] = []

    def receiver(*, run_id: Any, reason: str, **_: Any) -> None:
        seen.append((str(run_id), reason))

    run_resumable.connect(receiver, dispatch_uid="test-runner")
    yield seen
    run_resumable.disconnect(dispatch_uid="test-runner")


@pytest.fixture
def no_celery(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The agents app's receiver would enqueue a task; here only the offers are counted."""
    from celery_agents.apps import redispatch_resumable_run

    monkeypatch.setattr("celery_agents.tasks.run_agent.delay_on_commit", lambda *a, **k: None)
    run_resumable.disconnect(dispatch_uid="celery_agents.redispatch")
    yield
    run_resumable.connect(redispatch_resumable_run, dispatch_uid="celery_agents.redispatch")


def test_a_run_made_through_the_api_is_external_and_one_started_for_celery_is_celery(
    api: APIClient, no_celery: None
) -> None:
    made = api.post("/api/v1/runs/", {"agent": "support", "input": {}}).json()
    assert made["runner"] == "external"
    started, _ = agent_run_start(agent="support", input={"ticket": {}}, actor="test")
    assert api.get(f"/api/v1/runs/{started.pk}/").json()["runner"] == "celery"
    created = Event.objects.get(run_id=started.pk, type="run_created")
    assert created.payload["runner"] == "celery"


@pytest.mark.parametrize(("runner", "offers"), [("celery", 1), ("external", 0)])
def test_the_reaper_offers_only_celery_runs_to_celery(
    runner: str, offers: int, offered: list[Any], fake_clock: FakeClock, no_celery: None
) -> None:
    run, _ = run_create(agent="support", input={}, actor="test", runner=runner)
    run_lease_acquire(run_id=run.pk, worker="pod-7", ttl_seconds=5, actor="test")
    fake_clock.advance(seconds=6)
    assert runs_reap_expired_leases() == 1
    assert Run.objects.get(pk=run.pk).status == "interrupted"
    assert len([o for o in offered if o[0] == str(run.pk)]) == offers
    assert runs_redispatch_idle(idle_seconds=0) == offers


def test_the_celery_task_claims_a_pending_run_but_never_takes_over_an_external_one(
    no_celery: None,
) -> None:
    pending, _ = run_create(agent="support", input={}, actor="test")
    assert run_runner_claim_for_celery(run_id=pending.pk) is True
    assert Run.objects.get(pk=pending.pk).runner == "celery"
    under_way, _ = run_create(agent="support", input={}, actor="test")
    run_lease_acquire(run_id=under_way.pk, worker="pod-7", ttl_seconds=30, actor="test")
    assert run_runner_claim_for_celery(run_id=under_way.pk) is False
    assert Run.objects.get(pk=under_way.pk).runner == "external"
