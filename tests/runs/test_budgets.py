"""Budgets belong to the run: steps, tokens, cost, wall clock and recoveries survive restarts."""

import threading
from typing import Any

import httpx
import pytest
from rest_framework.test import APIClient

from runs.models import Event, Run, Step
from runs.tasks import enforce_deadlines as deadline_task
from tests.runs.journal_client import JournalClient


def leased(api: APIClient, agent: str = "support") -> tuple[JournalClient, str, int]:
    journal = JournalClient(api)
    run_id = journal.create(agent)["id"]
    return journal, run_id, journal.lease(run_id).json()["epoch"]


def test_the_21st_intent_of_a_20_step_budget_is_refused(api: APIClient, make_policy: Any) -> None:
    make_policy("support", max_steps=20)
    journal, run_id, epoch = leased(api)
    for index in range(20):
        assert journal.read(run_id, epoch, index).status_code == 201

    refused = journal.intent(run_id, epoch, 20)

    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert refused.json()["error"]["details"] == {"limit": "steps", "limit_value": 20, "used": 20}
    assert Step.objects.filter(run_id=run_id).count() == 20
    assert Run.objects.get(pk=run_id).status == "budget_exceeded"
    again = journal.intent(run_id, epoch, 20)
    assert again.json()["error"]["code"] == "budget_exceeded"


def test_an_outcome_over_the_token_budget_is_recorded_and_stops_the_run(
    api: APIClient, make_policy: Any
) -> None:
    make_policy("support", max_tokens=100)
    journal, run_id, epoch = leased(api)
    journal.write_step(run_id, epoch, 0, tokens=60)
    journal.intent(run_id, epoch, 1)

    over = journal.outcome(run_id, epoch, 1, tokens=50)

    assert over.status_code == 409
    error = over.json()["error"]
    assert error["code"] == "budget_exceeded"
    assert error["details"]["limit"] == "tokens"
    assert error["details"]["step"]["state"] == "done"  # the spend is a fact: recorded
    assert Run.objects.get(pk=run_id).used_tokens == 110
    refused = journal.intent(run_id, epoch, 2)
    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert Step.objects.filter(run_id=run_id).count() == 2


def test_a_run_that_reached_its_token_budget_exactly_takes_no_further_step(
    api: APIClient, make_policy: Any
) -> None:
    make_policy("support", max_tokens=100)
    journal, run_id, epoch = leased(api)
    assert journal.read(run_id, epoch, 0, tokens=100).status_code == 201

    refused = journal.read(run_id, epoch, 1, tokens=1)

    assert refused.status_code == 409
    assert refused.json()["error"]["details"]["limit"] == "tokens"
    assert Run.objects.get(pk=run_id).used_tokens == 100


def test_the_cost_budget_stops_the_run(api: APIClient, make_policy: Any) -> None:
    make_policy("support", max_cost_usd="0.05")
    journal, run_id, epoch = leased(api)
    journal.intent(run_id, epoch, 0)
    over = journal.outcome(run_id, epoch, 0, usage={"input_tokens": 1, "cost_usd": "0.06"})
    assert over.json()["error"]["details"]["limit"] == "cost_usd"
    assert Run.objects.get(pk=run_id).status == "budget_exceeded"


def test_the_wall_clock_deadline_refuses_intents_and_the_beat_task_stops_idle_runs(
    api: APIClient, make_policy: Any, fake_clock: Any
) -> None:
    make_policy("support", max_wall_seconds=60)
    journal, run_id, epoch = leased(api)
    idle_run_id = journal.create()["id"]
    fake_clock.advance(seconds=61)

    refused = journal.intent(run_id, epoch, 0)

    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert refused.json()["error"]["details"]["limit"] == "wall_seconds"
    assert deadline_task() == 1
    idle = Run.objects.get(pk=idle_run_id)
    assert (idle.status, idle.status_reason) == ("budget_exceeded", "wall_seconds")
    assert journal.lease(idle_run_id).json()["error"]["code"] == "budget_exceeded"


def test_a_crash_loop_is_stopped_by_max_recoveries_and_goes_to_review(
    api: APIClient, make_policy: Any, fake_clock: Any
) -> None:
    make_policy("support", max_recoveries=2)
    journal, run_id, epoch = leased(api)
    journal.write_step(run_id, epoch, 0)
    outcomes = []
    for attempt in range(4):  # each worker dies at step 1; the next one leases after expiry
        fake_clock.advance(seconds=31)
        lease = journal.lease(run_id, worker=f"w-{attempt}")
        outcomes.append(lease.status_code)
        if lease.status_code == 200:
            journal.intent(
                run_id,
                lease.json()["epoch"],
                1,
                effect="read",
                enforced_by=None,
                kind="model",
                name="m",
            )

    assert outcomes == [200, 200, 409, 409]
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.status_reason, run.used_recoveries) == ("needs_review", "recoveries", 3)
    assert Step.objects.filter(run_id=run_id).count() == 2
    assert journal.lease(run_id, worker="w-x").json()["error"]["code"] == "needs_review"


def test_limits_are_copied_at_creation_so_policy_edits_do_not_reach_running_runs(
    api: APIClient, make_policy: Any
) -> None:
    policy = make_policy("support", max_steps=3)
    journal, run_id, epoch = leased(api)
    policy.max_steps = 100
    policy.save()
    for index in range(3):
        journal.read(run_id, epoch, index)
    assert journal.intent(run_id, epoch, 3).json()["error"]["details"]["limit_value"] == 3


@pytest.mark.slow
def test_twenty_concurrent_intents_against_five_steps_left_create_exactly_five(
    transactional_db: Any, ledger_server: str, worker_token: str, make_policy: Any
) -> None:
    make_policy("racer", max_steps=10)
    headers = {"Authorization": f"Bearer {worker_token}"}
    with httpx.Client(base_url=ledger_server, headers=headers) as client:
        run_id = client.post("/api/v1/runs/", json={"agent": "racer", "input": {}}).json()["id"]
        epoch = client.post(f"/api/v1/runs/{run_id}/lease", json={"worker": "w"}).json()["epoch"]
        for index in range(5):
            step = {
                "epoch": epoch,
                "index": index,
                "kind": "model",
                "name": "m",
                "effect": "read",
                "arguments": {},
            }
            assert (
                client.post(
                    f"/api/v1/runs/{run_id}/steps/", json={**step, "outcome": {"result": 1}}
                ).status_code
                == 201
            )

    created: list[int] = []
    final_codes: list[str] = []
    barrier = threading.Barrier(20)

    def take_steps_until_refused(worker: int) -> None:
        """Each of 20 racers claims the next free index until the ledger says the budget is spent."""
        with httpx.Client(base_url=ledger_server, headers=headers, timeout=30) as client:
            index = 5
            barrier.wait()
            while True:
                body = {
                    "epoch": epoch,
                    "index": index,
                    "kind": "tool",
                    "name": f"t{worker}",
                    "effect": "write",
                    "arguments": {"w": worker},
                }
                response = client.post(f"/api/v1/runs/{run_id}/steps/", json=body)
                if response.status_code == 201:
                    created.append(index)
                    index += 1
                    continue
                error = response.json()["error"]
                if error["code"] in ("out_of_order", "nondeterministic"):
                    index = error["details"].get("expected_index", index + 1)
                    continue
                final_codes.append(error["code"])
                return

    threads = [threading.Thread(target=take_steps_until_refused, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    run = Run.objects.get(pk=run_id)
    assert sorted(created) == [5, 6, 7, 8, 9]
    assert (run.step_count, run.used_steps, run.status) == (10, 10, "budget_exceeded")
    assert Step.objects.filter(run_id=run_id).count() == 10
    assert final_codes == ["budget_exceeded"] * 20
    assert Event.objects.filter(run_id=run_id, type="step_intent").count() == 10
