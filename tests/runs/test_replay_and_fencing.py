"""A restarted worker replays its journal; a worker that lost its lease cannot write."""

from typing import Any

from rest_framework.test import APIClient

from runs.models import Event, Run, Step
from tests.runs.journal_client import JournalClient


def journalled_run(api: APIClient, steps: int) -> tuple[JournalClient, str, int]:
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    epoch = journal.lease(run_id, worker="w-7").json()["epoch"]
    for index in range(steps):
        journal.write_step(run_id, epoch, index, tokens=3)
    return journal, run_id, epoch


def test_reposting_intents_0_to_11_returns_the_recorded_steps_and_consumes_nothing(
    api: APIClient,
) -> None:
    journal, run_id, epoch = journalled_run(api, 12)
    before = journal.run(run_id)["budget"]["used"]
    events_before = Event.objects.filter(run_id=run_id).count()

    replies = [journal.intent(run_id, epoch, index) for index in range(12)]

    assert [r.status_code for r in replies] == [200] * 12
    assert [r.json()["state"] for r in replies] == ["done"] * 12
    assert [r.json()["result"] for r in replies] == [{"done": i} for i in range(12)]
    assert journal.run(run_id)["budget"]["used"] == before
    assert Event.objects.filter(run_id=run_id).count() == events_before


def test_different_arguments_at_a_recorded_index_are_nondeterministic(api: APIClient) -> None:
    journal, run_id, epoch = journalled_run(api, 3)

    response = journal.intent(run_id, epoch, 1, arguments={"n": "something else"})

    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "nondeterministic"
    assert error["details"]["index"] == 1
    assert (
        error["details"]["recorded"]["arguments_hash"]
        != error["details"]["given"]["arguments_hash"]
    )


def test_skipping_an_index_is_out_of_order(api: APIClient) -> None:
    journal, run_id, epoch = journalled_run(api, 3)

    response = journal.intent(run_id, epoch, 5)

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "out_of_order"
    assert response.json()["error"]["details"]["expected_index"] == 3
    assert Step.objects.filter(run_id=run_id).count() == 3


def test_after_a_second_lease_every_write_with_the_old_epoch_is_stale_and_changes_nothing(
    api: APIClient, fake_clock: Any
) -> None:
    journal, run_id, old_epoch = journalled_run(api, 2)
    journal.intent(run_id, old_epoch, 2, effect="read", enforced_by=None, kind="model", name="m")
    fake_clock.advance(seconds=31)
    new_lease = journal.lease(run_id, worker="w-9")
    assert new_lease.status_code == 200
    assert new_lease.json()["epoch"] == old_epoch + 1
    snapshot = (
        Run.objects.values().get(pk=run_id),
        list(Step.objects.filter(run_id=run_id).values()),
        Event.objects.filter(run_id=run_id).count(),
    )

    attempts = [
        journal.intent(run_id, old_epoch, 3),
        journal.intent(
            run_id, old_epoch, 2, effect="read", enforced_by=None, kind="model", name="m"
        ),
        journal.outcome(run_id, old_epoch, 2),
        journal.read(run_id, old_epoch, 3),
        api.post(f"/api/v1/runs/{run_id}/heartbeat", {"epoch": old_epoch}),
        api.post(f"/api/v1/runs/{run_id}/complete", {"epoch": old_epoch, "output": {}}),
        api.post(f"/api/v1/runs/{run_id}/fail", {"epoch": old_epoch, "error": "x"}),
    ]

    assert [a.status_code for a in attempts] == [409] * len(attempts)
    assert {a.json()["error"]["code"] for a in attempts} == {"stale_epoch"}
    assert (
        Run.objects.values().get(pk=run_id),
        list(Step.objects.filter(run_id=run_id).values()),
        Event.objects.filter(run_id=run_id).count(),
    ) == snapshot


def test_a_live_lease_held_by_another_worker_is_refused(api: APIClient) -> None:
    journal, run_id, _ = journalled_run(api, 1)

    response = journal.lease(run_id, worker="w-other")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "lease_held"
    assert response.json()["error"]["details"]["worker"] == "w-7"


def test_a_heartbeat_extends_the_lease(api: APIClient, fake_clock: Any) -> None:
    journal, run_id, epoch = journalled_run(api, 0)
    fake_clock.advance(seconds=20)

    response = api.post(f"/api/v1/runs/{run_id}/heartbeat", {"epoch": epoch})

    assert response.status_code == 200
    assert response.json()["status"] == "running"
    fake_clock.advance(seconds=20)  # 40 s after the lease, 20 s after the heartbeat
    assert journal.lease(run_id, worker="w-other").json()["error"]["code"] == "lease_held"
