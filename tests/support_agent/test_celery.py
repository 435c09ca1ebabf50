"""Agent runs on a real Celery worker (Redis DB 2): a killed worker's task comes back and resumes."""

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from celery_agents.services import agent_run_start
from runs.models import Event, Run, Step
from support_agent.support import ticket_input
from tests.support_agent.conftest import AgentDesk, effects_for
from tests.support_agent.fixtures import reaped_once_the_lease_lapses

pytestmark = pytest.mark.slow


def create_run(desk: AgentDesk) -> tuple[str, str]:
    ticket, customer = desk.new_ticket()
    body = {
        "agent": "support",
        "input": ticket_input(ticket, customer=customer, subject="Charged twice", body="Refund?"),
        "external_id": f"ticket:{ticket}",
    }
    response = httpx.post(
        f"{desk.url}/api/v1/runs/", json=body, headers={"Authorization": f"Bearer {desk.token}"}
    )
    assert response.status_code == 201, response.text
    # a run of the Celery workers (runner celery, as start_agent_run makes it): an API-made run
    # is external and never re-dispatched to Celery
    Run.objects.filter(pk=response.json()["id"]).update(runner="celery")
    return response.json()["id"], customer


def wait_for_status(run_id: str, statuses: set[str], timeout: float = 120) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if run.status in statuses:
            return run
        time.sleep(0.3)
    raise AssertionError(f"run {run_id} still {Run.objects.get(pk=run_id).status}")


@pytest.mark.parametrize("transport", ["inprocess", "http"])
def test_celery_worker_killed_after_its_email_step_is_redelivered_and_sends_one_email(
    desk: AgentDesk, start_worker: Callable[..., Any], celery_on_db2: None, transport: str
) -> None:
    # the pool process running the task is SIGKILLed right after step 11 (email.send) is
    # journalled; the agents journal in-process (the default; no web server to reach: the URL
    # points nowhere) or over HTTP
    unreachable = {"INTENTLEDGER_URL": "http://127.0.0.1:9"} if transport == "inprocess" else {}
    _worker, log = start_worker(
        AGENT_CRASH_AFTER_STEP="11", LEDGER_AGENT_TRANSPORT=transport, **unreachable
    )
    ticket, customer = desk.new_ticket()
    started, created = agent_run_start(
        agent="support",
        input=ticket_input(ticket, customer=customer, subject="Charged twice", body="Refund?"),
        external_id=f"ticket:{ticket}",
        actor="test",
    )
    assert created
    run_id = str(started.pk)

    run = wait_for_status(run_id, {"completed", "needs_review", "failed"})
    text = log.read_text()
    assert run.status == "completed", text
    assert "crash hook: after step 11: SIGKILL" in text
    assert "WorkerLostError" in text  # the child died; the task was rejected and redelivered
    leases = list(Event.objects.filter(run=run, type="lease_acquired").order_by("seq"))
    assert [e.payload["recovery"] for e in leases] == [False, True]
    assert leases[1].payload["replayable_steps"] == 12
    assert Step.objects.get(run=run, index=11).name == "email.send"
    assert run.step_count == 20 and run.used_steps == 20
    assert not Step.objects.filter(run=run, executions__gt=1).exists()
    assert effects_for(desk, customer) == (1, 1, 1)


def test_whole_celery_worker_lost_mid_run_the_reaper_hands_the_run_to_another_worker(
    desk: AgentDesk, start_worker: Callable[..., Any], celery_on_db2: None
) -> None:
    # a lost pod: the worker and its pool die together after step 12, nobody rejects the task
    lost, lost_log = start_worker(
        AGENT_CRASH_AFTER_STEP="12", AGENT_CRASH_SCOPE="group", AGENT_LEASE_TTL="5"
    )
    ticket, customer = desk.new_ticket()
    started, _ = agent_run_start(
        agent="support",
        input=ticket_input(ticket, customer=customer, subject="Charged twice", body="Refund?"),
        external_id=f"ticket:{ticket}",
        actor="test",
    )
    assert lost.wait(timeout=60) == -9, lost_log.read_text()
    assert Run.objects.get(pk=started.pk).step_count == 13

    # another machine's worker; beat's reaper sees the lease lapse and re-dispatches the run
    _other, other_log = start_worker()
    reaped_once_the_lease_lapses()
    run = wait_for_status(str(started.pk), {"completed", "needs_review", "failed"})
    assert run.status == "completed", other_log.read_text()
    leases = list(Event.objects.filter(run=run, type="lease_acquired").order_by("seq"))
    assert [e.payload["recovery"] for e in leases] == [False, True]
    assert leases[0].payload["worker"] != leases[1].payload["worker"]
    assert Event.objects.filter(run=run, type="lease_expired").count() == 1
    assert not Step.objects.filter(run=run, executions__gt=1).exists()
    assert effects_for(desk, customer) == (1, 1, 1)


def test_reaper_redispatches_an_interrupted_run_to_a_celery_worker(
    desk: AgentDesk, start_worker: Callable[..., Any], celery_on_db2: None
) -> None:
    run_id, customer = create_run(desk)
    # a worker leased it and vanished before doing anything (no task is queued for it)
    lease = httpx.post(
        f"{desk.url}/api/v1/runs/{run_id}/lease",
        json={"worker": "vanished", "ttl_seconds": 5},
        headers={"Authorization": f"Bearer {desk.token}"},
    )
    assert lease.status_code == 200
    start_worker()  # while the 5 s lease runs out

    # the beat task's service: interrupted -> run_resumable -> agents re-dispatch (after commit)
    assert reaped_once_the_lease_lapses() == 1
    run = wait_for_status(run_id, {"completed", "needs_review", "failed"})
    assert run.status == "completed", run.error
    types = list(Event.objects.filter(run=run).values_list("type", flat=True))
    assert "lease_expired" in types
    assert effects_for(desk, customer) == (1, 1, 1)
