"""Concurrent duplicates over the real HTTP stack: the row lock and the constraints decide, once."""

from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

from runs.models import Event, Run, Step
from tests.reliability.conftest import Scale
from tests.reliability.helpers import Worker, all_at_once, chain_intact


def test_two_workers_racing_for_one_lease_exactly_one_wins(
    ledger_server: str, raw_token: str, transactional_db: Any
) -> None:
    setup = Worker(ledger_server, raw_token)
    for round_ in range(10):
        run_id = setup.create(external_id=f"race-{round_}")["id"]

        def grab(i: int, run_id: str = run_id) -> httpx.Response:
            with httpx.Client(
                base_url=ledger_server, headers={"Authorization": f"Bearer {raw_token}"}
            ) as client:
                return client.post(
                    f"/api/v1/runs/{run_id}/lease", json={"worker": f"racer-{i}", "ttl_seconds": 30}
                )

        first, second = all_at_once(2, grab)
        statuses = sorted([first.status_code, second.status_code])
        assert statuses == [200, 409], (first.text, second.text)
        loser = first if first.status_code == 409 else second
        assert loser.json()["error"]["code"] == "lease_held"
        run = Run.objects.get(pk=run_id)
        assert run.epoch == 1
        assert run.leases_granted == 1
        assert Event.objects.filter(run=run, type="lease_acquired").count() == 1
    setup.close()


def test_fifty_identical_intents_at_once_record_one_step_and_spend_one_step_of_budget(
    ledger_server: str, raw_token: str, transactional_db: Any, scale: Scale
) -> None:
    setup = Worker(ledger_server, raw_token)
    run_id = setup.create()["id"]
    epoch = setup.lease(run_id).json()["epoch"]
    count = scale.concurrent_intents

    def intent(i: int) -> httpx.Response:
        worker = Worker(ledger_server, raw_token)
        try:
            return worker.intent(run_id, epoch, 0, arguments={"customer": "a@example.com"})
        finally:
            worker.close()

    responses = all_at_once(count, intent)
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {201: 1, 200: count - 1}, statuses
    keys = {r.json()["idempotency_key"] for r in responses}
    assert len(keys) == 1
    run = Run.objects.get(pk=run_id)
    assert Step.objects.filter(run=run).count() == 1
    assert (run.step_count, run.used_steps) == (1, 1)
    assert Event.objects.filter(run=run, type="step_intent").count() == 1
    assert chain_intact(run_id)
    setup.close()


def test_twenty_concurrent_intents_with_five_steps_left_create_exactly_five_steps(
    ledger_server: str,
    raw_token: str,
    transactional_db: Any,
    make_policy: Callable[..., Any],
) -> None:
    make_policy("tight", max_steps=8)
    setup = Worker(ledger_server, raw_token)
    run_id = setup.create(agent="tight")["id"]
    epoch = setup.lease(run_id).json()["epoch"]
    for index in range(3):
        assert setup.intent(run_id, epoch, index).status_code == 201
        assert setup.outcome(run_id, epoch, index).status_code == 200

    def keep_stepping(i: int) -> Counter[str]:
        """Each thread takes the next free index until the budget refuses; races lose and retry."""
        seen: Counter[str] = Counter()
        worker = Worker(ledger_server, raw_token)
        try:
            for _ in range(40):
                index = worker.run(run_id)["step_count"]
                response = worker.intent(run_id, epoch, index, arguments={"thread": i})
                if response.status_code == 201:
                    seen["created"] += 1
                    continue
                assert response.status_code == 409, response.text
                code = response.json()["error"]["code"]
                seen[code] += 1
                if code == "budget_exceeded":
                    return seen
                assert code in ("nondeterministic", "out_of_order"), response.text
            raise AssertionError(f"thread {i} never saw budget_exceeded: {seen}")
        finally:
            worker.close()

    outcomes = all_at_once(20, keep_stepping)
    created = sum(c["created"] for c in outcomes)
    assert created == 5
    assert all(c["budget_exceeded"] == 1 for c in outcomes)
    run = Run.objects.get(pk=run_id)
    assert (run.step_count, run.used_steps, run.limit_steps) == (8, 8, 8)
    assert run.status == "budget_exceeded"
    assert sorted(Step.objects.filter(run=run).values_list("index", flat=True)) == list(range(8))
    assert Event.objects.filter(run=run, type="step_intent").count() == 8
    assert Event.objects.filter(run=run, type="budget_exceeded").count() == 1
    assert chain_intact(run_id)
    setup.close()


def test_concurrent_read_steps_overshoot_the_token_budget_by_at_most_the_last_outcome(
    ledger_server: str,
    raw_token: str,
    transactional_db: Any,
    make_policy: Callable[..., Any],
) -> None:
    """Usage is a fact recorded with its step; only the outcome that crosses the limit may pass it."""
    make_policy("tokens", max_steps=500, max_tokens=1000)
    setup = Worker(ledger_server, raw_token)
    run_id = setup.create(agent="tokens")["id"]
    epoch = setup.lease(run_id).json()["epoch"]
    per_step = 70

    def keep_reading(i: int) -> Counter[str]:
        seen: Counter[str] = Counter()
        worker = Worker(ledger_server, raw_token)
        try:
            for _ in range(60):
                index = worker.run(run_id)["step_count"]
                response = worker.intent(
                    run_id,
                    epoch,
                    index,
                    kind="model",
                    name="model.chat",
                    effect="read",
                    enforced_by=None,
                    arguments={"thread": i},
                    outcome={
                        "status": "ok",
                        "result": {},
                        "usage": {"input_tokens": per_step, "output_tokens": 0},
                    },
                )
                if response.status_code == 201:
                    seen["recorded"] += 1
                    continue
                code = response.json()["error"]["code"]
                seen[code] += 1
                if code == "budget_exceeded":
                    return seen
            raise AssertionError(f"thread {i} never saw budget_exceeded: {seen}")
        finally:
            worker.close()

    outcomes = all_at_once(20, keep_reading)
    run = Run.objects.get(pk=run_id)
    recorded = Step.objects.filter(run=run, state="done").count()
    assert run.status == "budget_exceeded"
    assert run.used_tokens == recorded * per_step  # every recorded step counted, once
    assert run.limit_tokens < run.used_tokens <= run.limit_tokens + per_step
    assert (
        sum(c["recorded"] for c in outcomes) + sum(c["budget_exceeded"] for c in outcomes)
        >= recorded
    )
    assert chain_intact(run_id)
    setup.close()
