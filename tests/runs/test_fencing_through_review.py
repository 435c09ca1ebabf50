"""A worker paused past its lease is fenced off while a supervisor reviews, and after the decision.

The story: worker w-1 journals the intent to send an email nobody can deduplicate, then stalls
(a long GC pause, a frozen VM). Its lease runs out; worker w-2 leases the run, the recovery rules
find the email's outcome unknown, and the run goes to review. w-1 wakes up: whatever it tries,
during the review or after a supervisor's "sent" or "retry", is `stale_epoch` and changes nothing.
"""

from typing import Any

import pytest
from rest_framework.test import APIClient

from runs.models import Event, Run, Step
from runs.services.decisions import run_review_decide, step_resolve
from tests.runs.journal_client import JournalClient


def stalled_worker_and_review(api: APIClient, fake_clock: Any) -> tuple[JournalClient, str, int]:
    """w-1 holds epoch `old`, with an open nobody-enforced write at step 1; w-2's lease sends the
    run to review."""
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    old = journal.lease(run_id, worker="w-1").json()["epoch"]
    journal.write_step(run_id, old, 0)
    assert (
        journal.intent(run_id, old, 1, name="email.send", enforced_by="nobody").status_code == 201
    )
    fake_clock.advance(seconds=31)

    takeover = journal.lease(run_id, worker="w-2")

    assert takeover.status_code == 409
    assert takeover.json()["error"]["code"] == "needs_review"
    return journal, run_id, old


def snapshot(run_id: str) -> tuple[Any, ...]:
    return (
        Run.objects.values("status", "epoch", "step_count", "event_seq", "output").get(pk=run_id),
        list(Step.objects.filter(run_id=run_id).values("index", "state", "executions", "epoch")),
        Event.objects.filter(run_id=run_id).count(),
    )


def stale_attempts(journal: JournalClient, run_id: str, epoch: int) -> list[Any]:
    api = journal.api
    return [
        api.post(f"/api/v1/runs/{run_id}/heartbeat", {"epoch": epoch}),
        journal.intent(run_id, epoch, 1, name="email.send", enforced_by="nobody"),
        journal.intent(run_id, epoch, 2),
        journal.read(run_id, epoch, 2),
        journal.outcome(run_id, epoch, 1),
        api.post(f"/api/v1/runs/{run_id}/complete", {"epoch": epoch, "output": {"ok": True}}),
        api.post(f"/api/v1/runs/{run_id}/fail", {"epoch": epoch, "error": {"why": "x"}}),
    ]


def assert_all_stale(replies: list[Any]) -> None:
    assert [r.status_code for r in replies] == [409] * len(replies), [r.json() for r in replies]
    assert {r.json()["error"]["code"] for r in replies} == {"stale_epoch"}


def test_a_lease_whose_recovery_sends_the_run_to_review_moves_the_epoch_on(
    api: APIClient, fake_clock: Any
) -> None:
    _, run_id, old = stalled_worker_and_review(api, fake_clock)

    run = Run.objects.get(pk=run_id)
    assert run.status == "needs_review"
    assert run.epoch > old


def test_the_stalled_worker_writes_nothing_while_the_run_is_in_review(
    api: APIClient, fake_clock: Any
) -> None:
    journal, run_id, old = stalled_worker_and_review(api, fake_clock)
    before = snapshot(run_id)

    assert_all_stale(stale_attempts(journal, run_id, old))
    assert snapshot(run_id) == before


@pytest.mark.parametrize("action", ["sent", "retry"])
def test_after_the_supervisor_decides_the_stalled_worker_is_still_fenced_off(
    api: APIClient, fake_clock: Any, action: str
) -> None:
    journal, run_id, old = stalled_worker_and_review(api, fake_clock)
    epoch_in_review = Run.objects.get(pk=run_id).epoch

    step_resolve(run_id=run_id, index=1, action=action, note="checked the mailbox", by="sam")
    resumed = Run.objects.get(pk=run_id)
    assert resumed.status == "running"
    assert resumed.epoch > epoch_in_review
    before = snapshot(run_id)

    assert_all_stale(stale_attempts(journal, run_id, old))
    assert_all_stale(stale_attempts(journal, run_id, epoch_in_review))
    assert snapshot(run_id) == before
    # the email step ran once: a retry is the next lease holder's to run, never the stalled one's
    assert Step.objects.get(run_id=run_id, index=1).executions == 1


def test_after_the_decision_the_next_lease_carries_on_with_a_newer_epoch(
    api: APIClient, fake_clock: Any
) -> None:
    journal, run_id, old = stalled_worker_and_review(api, fake_clock)
    step_resolve(run_id=run_id, index=1, action="retry", note="not in outbox", by="sam")
    resumed_epoch = Run.objects.get(pk=run_id).epoch

    lease = journal.lease(run_id, worker="w-2")

    assert lease.status_code == 200
    epoch = lease.json()["epoch"]
    assert epoch > resumed_epoch > old
    reopened = journal.intent(run_id, epoch, 1, name="email.send", enforced_by="nobody")
    assert reopened.status_code == 201
    assert reopened.json()["state"] == "intent"
    assert Step.objects.get(run_id=run_id, index=1).executions == 2


def test_resuming_a_crash_looped_run_fences_the_worker_that_looped(
    api: APIClient, fake_clock: Any, make_policy: Any
) -> None:
    make_policy("looper", max_recoveries=0)
    journal = JournalClient(api)
    run_id = journal.create(agent="looper")["id"]
    old = journal.lease(run_id, worker="w-1").json()["epoch"]
    fake_clock.advance(seconds=31)
    assert journal.lease(run_id, worker="w-2").json()["error"]["code"] == "needs_review"
    in_review = Run.objects.get(pk=run_id).epoch
    assert in_review > old

    run_review_decide(run_id=run_id, action="resume", note="fixed the pod", by="ada")

    assert Run.objects.get(pk=run_id).epoch > in_review
    assert_all_stale(stale_attempts(journal, run_id, in_review))
