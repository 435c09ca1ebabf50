"""Approval before a risky write: the journal kernel holds a matching intent until people decide.

The story: the support agent may search and comment freely, but an `email.send` to a customer
waits for a supervisor (or two). The worker's intent answers 202 `awaiting_approval`; approval
hands the step to the worker once (bound to run, index and arguments hash); a denial is
`approval_denied` for as long as the agent asks for that step; nobody deciding in time expires it.
Every run that used approvals still verifies (`verify_journal`).
"""

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from runs.api_errors import ApplicationError
from runs.binding import StepReplay
from runs.constants import ApprovalOutcome, StepState
from runs.models import ApprovalRequest, ApprovalRule, Event, Step
from runs.services.approvals import approvals_expire_due, step_approve, step_deny
from runs.services.enforcement import runs_reap_expired_leases
from tests.runs.journal_client import JournalClient

EMAIL = {"to": "ana@example.com", "subject": "Your refund", "body": "Done."}


def verify(run_id: str) -> None:
    out = StringIO()
    call_command("verify_journal", "--run", run_id, stdout=out)
    assert " 0 breaks" in out.getvalue(), out.getvalue()


def email_intent(journal: JournalClient, run_id: str, epoch: int, index: int = 1) -> Any:
    return journal.intent(
        run_id, epoch, index, name="email.send", enforced_by="nobody", arguments=EMAIL
    )


@pytest.fixture
def rule(db: Any) -> ApprovalRule:
    return ApprovalRule.objects.create(agent="support", tool_pattern="email.*")


@pytest.fixture
def waiting(api: APIClient, rule: ApprovalRule) -> tuple[JournalClient, str, int]:
    """A run whose step 1 (email.send) waits for approval; step 0 ran without asking anyone."""
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    epoch = journal.lease(run_id).json()["epoch"]
    journal.write_step(run_id, epoch, 0)  # tool.0 matches no rule
    answer = email_intent(journal, run_id, epoch)
    assert answer.status_code == 202, answer.content
    assert answer.json()["state"] == "awaiting_approval"
    return journal, run_id, epoch


def test_a_matching_write_waits_and_a_replay_of_it_is_202_again(
    waiting: tuple[JournalClient, str, int],
) -> None:
    journal, run_id, epoch = waiting
    again = email_intent(journal, run_id, epoch)
    assert again.status_code == 202
    request = ApprovalRequest.objects.get(step__run_id=run_id, step__index=1)
    assert request.outcome == ApprovalOutcome.PENDING
    assert request.arguments_hash == again.json()["arguments_hash"]
    # the tool cannot report an outcome for a step nobody approved
    refused = journal.outcome(run_id, epoch, 1)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "outcome_conflict"
    types = list(Event.objects.filter(run_id=run_id).values_list("type", flat=True))
    assert types[-2:] == ["step_intent", "approval_requested"]
    verify(run_id)


def test_reads_and_other_agents_never_wait(api: APIClient, rule: ApprovalRule) -> None:
    journal = JournalClient(api)
    run_id = journal.create(agent="billing")["id"]
    epoch = journal.lease(run_id).json()["epoch"]
    assert email_intent(journal, run_id, epoch, index=0).status_code == 201
    other = journal.create()["id"]
    epoch = journal.lease(other).json()["epoch"]
    assert journal.read(other, epoch, 0).status_code == 201
    assert journal.intent(other, epoch, 1, name="email_send").status_code == 201  # _ is literal


def test_one_approval_hands_the_step_to_the_waiting_worker_once(
    waiting: tuple[JournalClient, str, int],
) -> None:
    journal, run_id, epoch = waiting
    step_approve(run_id=run_id, index=1, by="sam", note="customer asked for it")
    detail = journal.api.get(f"/api/v1/runs/{run_id}/steps/1/?wait=5")
    assert detail.status_code == 200 and detail.json()["state"] == "intent"

    taken = email_intent(journal, run_id, epoch)
    assert taken.status_code == 200 and taken.json()["state"] == "intent"
    assert journal.outcome(run_id, epoch, 1).status_code == 200
    step = Step.objects.get(run_id=run_id, index=1)
    assert (step.state, step.executions) == (StepState.DONE, 1)
    with pytest.raises(ApplicationError) as refused:
        step_approve(run_id=run_id, index=1, by="kim")
    assert refused.value.code == "approval_decided"
    assert "sam" in refused.value.message
    verify(run_id)


def test_two_approvals_need_two_different_people(
    waiting: tuple[JournalClient, str, int], rule: ApprovalRule
) -> None:
    _, run_id, _ = waiting
    ApprovalRequest.objects.filter(step__run_id=run_id).update(approvals_required=2)
    step_approve(run_id=run_id, index=1, by="sam")
    with pytest.raises(ApplicationError) as twice:
        step_approve(run_id=run_id, index=1, by="sam")
    assert twice.value.code == "already_approved"
    assert Step.objects.get(run_id=run_id, index=1).state == StepState.AWAITING_APPROVAL
    step_approve(run_id=run_id, index=1, by="kim")
    assert Step.objects.get(run_id=run_id, index=1).state == StepState.INTENT
    approved = Event.objects.get(run_id=run_id, type="step_approved")
    assert approved.payload["by"] == ["sam", "kim"]
    verify(run_id)


def test_a_denied_step_is_approval_denied_for_the_worker_forever(
    waiting: tuple[JournalClient, str, int],
) -> None:
    journal, run_id, epoch = waiting
    with pytest.raises(ApplicationError):
        step_deny(run_id=run_id, index=1, by="sam", note="  ")
    step_deny(run_id=run_id, index=1, by="sam", note="wrong customer")
    for _ in range(2):
        refused = email_intent(journal, run_id, epoch)
        assert refused.status_code == 409
        error = refused.json()["error"]
        assert error["code"] == "approval_denied"
        assert error["details"]["by"] == "sam" and error["details"]["note"] == "wrong customer"
    step = journal.api.get(f"/api/v1/runs/{run_id}/steps/1/").json()
    assert step["state"] == "denied"
    assert step["resolution"]["action"] == "deny"
    with pytest.raises(ApplicationError) as late:
        step_approve(run_id=run_id, index=1, by="kim")
    assert late.value.code == "approval_decided" and "sam" in late.value.message
    # the agent goes on with its next step
    assert journal.intent(run_id, epoch, 2).status_code == 201
    verify(run_id)


def test_nobody_deciding_in_time_expires_the_step(
    waiting: tuple[JournalClient, str, int], fake_clock: Any
) -> None:
    journal, run_id, epoch = waiting
    ApprovalRequest.objects.filter(step__run_id=run_id).update(
        expires_at=fake_clock.now + timedelta(minutes=5)
    )
    assert approvals_expire_due() == 0
    fake_clock.advance(seconds=301)
    with pytest.raises(ApplicationError) as refused:
        step_approve(run_id=run_id, index=1, by="sam")
    assert refused.value.code == "approval_decided" and "expired" in refused.value.message
    step = Step.objects.get(run_id=run_id, index=1)
    assert (step.state, step.resolution_action) == (StepState.DENIED, "expire")
    assert email_intent(journal, run_id, epoch).json()["error"]["code"] == "approval_denied"
    verify(run_id)


def test_the_beat_expires_what_nobody_looked_at(
    waiting: tuple[JournalClient, str, int], fake_clock: Any
) -> None:
    _, run_id, _ = waiting
    ApprovalRequest.objects.filter(step__run_id=run_id).update(expires_at=fake_clock.now)
    assert approvals_expire_due() == 1
    assert Step.objects.get(run_id=run_id, index=1).state == StepState.DENIED
    verify(run_id)


def test_approval_of_a_finished_run_is_refused(
    waiting: tuple[JournalClient, str, int],
) -> None:
    journal, run_id, epoch = waiting
    # the agent gave up waiting and finished without the email
    done = journal.api.post(f"/api/v1/runs/{run_id}/complete", {"epoch": epoch, "output": {}})
    assert done.status_code == 200
    with pytest.raises(ApplicationError) as refused:
        step_approve(run_id=run_id, index=1, by="sam")
    assert refused.value.code == "run_finished"


def test_a_worker_killed_while_waiting_resumes_and_runs_the_approved_step_once(
    waiting: tuple[JournalClient, str, int], fake_clock: Any
) -> None:
    """w-1 dies waiting; the reaper interrupts the run; the approval comes while nobody holds
    it; w-2's lease finds the approved step never handed out (interrupted, not unknown), takes
    it and runs it: one execution."""
    journal, run_id, _ = waiting
    fake_clock.advance(seconds=31)
    assert runs_reap_expired_leases() == 1
    step_approve(run_id=run_id, index=1, by="sam")

    lease = journal.lease(run_id, worker="w-2")
    assert lease.status_code == 200, lease.content
    epoch = lease.json()["epoch"]
    states = {s["index"]: s["state"] for s in lease.json()["journal"]}
    assert states == {0: "done", 1: "interrupted"}
    assert email_intent(journal, run_id, epoch).status_code == 201  # re-executed, same key
    assert journal.outcome(run_id, epoch, 1).status_code == 200
    step = Step.objects.get(run_id=run_id, index=1)
    assert (step.state, step.executions) == (StepState.DONE, 1)
    verify(run_id)


def test_a_worker_killed_after_taking_the_approved_step_goes_to_review(
    waiting: tuple[JournalClient, str, int], fake_clock: Any
) -> None:
    """Once a worker took the approved step, the tool may have run: the usual rules apply."""
    journal, run_id, epoch = waiting
    step_approve(run_id=run_id, index=1, by="sam")
    assert email_intent(journal, run_id, epoch).status_code == 200
    fake_clock.advance(seconds=31)
    assert journal.lease(run_id, worker="w-2").json()["error"]["code"] == "needs_review"
    assert Step.objects.get(run_id=run_id, index=1).state == StepState.UNKNOWN
    verify(run_id)


def test_the_wait_answers_at_its_timeout_and_refuses_a_bad_wait(
    waiting: tuple[JournalClient, str, int],
) -> None:
    journal, run_id, _ = waiting
    answer = journal.api.get(f"/api/v1/runs/{run_id}/steps/1/?wait=1")
    assert answer.status_code == 200 and answer.json()["state"] == "awaiting_approval"
    bad = journal.api.get(f"/api/v1/runs/{run_id}/steps/1/?wait=61")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "validation_error"
    missing = journal.api.get(f"/api/v1/runs/{run_id}/steps/9/")
    assert missing.status_code == 404


def test_the_replay_binds_approval_events() -> None:
    replay = StepReplay()
    intent = {"index": 0, "arguments_hash": "h", "name": "email.send"}
    replay.feed(seq=1, type="step_intent", payload=intent, at="t1")
    replay.feed(seq=2, type="approval_requested", payload={"index": 0}, at="t1")
    assert replay.steps[0].state == "awaiting_approval"
    replay.feed(seq=3, type="approval_given", payload={"index": 0, "by": "a"}, at="t2")
    assert replay.steps[0].state == "awaiting_approval"
    replay.feed(seq=4, type="step_denied", payload={"index": 0, "by": "b", "note": "n"}, at="t3")
    assert replay.steps[0].state == "denied"
    assert replay.steps[0].resolution == {"action": "deny", "by": "b", "note": "n", "at": "t3"}


def test_the_drf_view_answers_202_too_when_the_lean_path_declines(
    api: APIClient, rule: ApprovalRule
) -> None:
    """The lean path declines anything unusual (here the epoch as a string, which DRF accepts);
    the kernel decides either way, and both doors say 202."""
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    epoch = journal.lease(run_id).json()["epoch"]
    body = {
        "epoch": str(epoch),
        "index": 0,
        "kind": "tool",
        "name": "email.send",
        "effect": "write",
        "enforced_by": "nobody",
        "arguments": EMAIL,
    }
    answer = api.post(f"/api/v1/runs/{run_id}/steps/", body)
    assert answer.status_code == 202, answer.content
    assert answer.json()["state"] == "awaiting_approval"
    step_deny(run_id=run_id, index=0, by="sam", note="no")
    refused = api.post(f"/api/v1/runs/{run_id}/steps/", body)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "approval_denied"
