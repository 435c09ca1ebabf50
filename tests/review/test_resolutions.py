"""Resolving review items from the dashboard: outcomes, refusals with clear messages, claims."""

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, SUPERVISORS
from review.services import resolutions
from runs.constants import RunStatus, StepState
from runs.models import Event, Step
from tests.review.factories import (
    UnknownStep,
    crash_looped_run,
    finish_run_as_worker,
    user_in,
)


def _client(group: str, username: str | None = None) -> Client:
    client = Client()
    client.force_login(user_in(group, username))
    return client


def _messages(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _resolve(client: Client, u: UnknownStep, **data: Any) -> Any:
    return client.post(f"/queue/{u.run_id}/{u.index}/resolve", data, follow=True)


def _unchanged(u: UnknownStep, events_before: int) -> None:
    step = u.step
    assert step.state == StepState.UNKNOWN
    assert step.resolution_action is None
    assert u.run.status == RunStatus.NEEDS_REVIEW
    assert Event.objects.filter(run_id=u.run_id).count() == events_before
    assert not AuditEntry.objects.filter(action__startswith="step.resolve").exists()


@pytest.mark.django_db
def test_mark_as_sent_with_observed_result_resumes_the_run_and_audits_it(unknown_step):
    response = _resolve(
        _client(SUPERVISORS),
        unknown_step,
        action="sent",
        note="Found it in the SMTP log",
        result='{"email": {"id": 9, "message_id": "<x@y>"}}',
    )
    assert response.status_code == 200
    assert "Step 2 marked as sent." in _messages(response)
    step = unknown_step.step
    assert step.state == StepState.DONE
    assert step.result == {"email": {"id": 9, "message_id": "<x@y>"}}
    assert (step.resolution_by, step.resolution_note) == (
        "supervisors-user",
        "Found it in the SMTP log",
    )
    assert unknown_step.run.status == RunStatus.RUNNING
    entry = AuditEntry.objects.get(action="step.resolve.sent")
    assert entry.target == f"step:{unknown_step.run_id}#2"
    assert entry.note == "Found it in the SMTP log"
    assert Event.objects.filter(run_id=unknown_step.run_id, type="step_resolved").count() == 1
    assert finish_run_as_worker(unknown_step.run_id).status == RunStatus.COMPLETED


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"action": "sent", "note": ""}, "A note is required"),
        ({"action": "sent", "note": "   "}, "A note is required"),
        ({"action": "resend", "note": "x"}, "Action: Select a valid choice"),
        ({"action": "sent", "note": "x", "result": "{not json"}, "not valid JSON"),
        ({"action": "retry", "note": "x", "result": "{}"}, "only goes with 'mark as sent'"),
    ],
    ids=["empty note", "blank note", "unknown action", "bad result json", "result on retry"],
)
def test_bad_form_input_gets_a_clear_message_and_changes_nothing(unknown_step, data, message):
    events = Event.objects.filter(run_id=unknown_step.run_id).count()
    response = _resolve(_client(SUPERVISORS), unknown_step, **data)
    assert response.status_code == 200
    assert any(message in m for m in _messages(response)), _messages(response)
    assert not any(m.startswith(("note:", "action:")) for m in _messages(response))  # no code
    _unchanged(unknown_step, events)


@pytest.mark.django_db
def test_an_unknown_step_address_is_a_clear_404(unknown_step):
    client = _client(SUPERVISORS)
    response = client.post(
        f"/queue/{unknown_step.run_id}/99/resolve", {"action": "sent", "note": "x"}
    )
    assert response.status_code == 404
    assert b"No such step." in response.content
    response = client.post(
        "/queue/00000000-0000-0000-0000-000000000000/2/resolve", {"action": "sent", "note": "x"}
    )
    assert response.status_code == 404
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_a_step_that_is_not_unknown_is_refused_with_its_state(unknown_step):
    events = Event.objects.filter(run_id=unknown_step.run_id).count()
    response = _resolve(
        _client(SUPERVISORS), UnknownStep(unknown_step.run_id, 1, 1), action="sent", note="x"
    )
    assert "Step 1 is done; only unknown steps are resolved." in _messages(response)
    _unchanged(unknown_step, events)


@pytest.mark.django_db
def test_a_second_resolution_is_refused_naming_who_resolved_and_when(unknown_step):
    _resolve(_client(SUPERVISORS, "alice"), unknown_step, action="sent", note="alice saw it")
    events = Event.objects.filter(run_id=unknown_step.run_id).count()
    response = _resolve(_client(SUPERVISORS, "bob"), unknown_step, action="abandon", note="bob")
    [message] = _messages(response)
    assert message.startswith("alice already resolved this step as sent at ")
    step = unknown_step.step
    assert (step.state, step.resolution_by, step.resolution_action) == (
        StepState.DONE,
        "alice",
        "sent",
    )
    assert Event.objects.filter(run_id=unknown_step.run_id).count() == events
    assert AuditEntry.objects.filter(action__startswith="step.resolve").count() == 1
    assert b"Resolved as <strong>sent</strong> by <strong>alice</strong>" in response.content


@pytest.mark.django_db
def test_htmx_resolution_answers_the_decision_partial_and_tells_the_queue(unknown_step):
    client = _client(SUPERVISORS)
    response = client.post(
        f"/queue/{unknown_step.run_id}/2/resolve",
        {"action": "retry", "note": "not in the log", "confirm_repeat": "on"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    assert response["HX-Trigger"] == '{"queue-changed": {}}'
    body = response.content.decode()
    assert body.lstrip().startswith('<section class="card" id="decision"')
    assert "<html" not in body
    assert "sent back for retry" in body
    assert unknown_step.step.state == StepState.INTERRUPTED


@pytest.mark.django_db
def test_abandon_ends_the_run(unknown_step):
    _resolve(_client(ADMINS), unknown_step, action="abandon", note="customer cancelled")
    assert unknown_step.step.state == StepState.ABANDONED
    assert unknown_step.run.status == RunStatus.ABANDONED


@pytest.mark.django_db
def test_a_claimed_item_cannot_be_resolved_by_someone_else_until_the_claim_expires(
    unknown_step, settings
):
    alice = _client(SUPERVISORS, "alice")
    alice.post(f"/queue/{unknown_step.run_id}/2/claim")
    assert unknown_step.step.claimed_by.username == "alice"
    bob = _client(SUPERVISORS, "bob")
    response = bob.post(f"/queue/{unknown_step.run_id}/2/claim", follow=True)
    assert any(m.startswith("alice already claimed this item") for m in _messages(response))
    response = _resolve(bob, unknown_step, action="sent", note="bob")
    assert any(m.startswith("alice is working on this item") for m in _messages(response))
    assert unknown_step.step.state == StepState.UNKNOWN
    # alice gives the item up: bob may claim it; then his claim expires
    alice.post(f"/queue/{unknown_step.run_id}/2/release")
    assert unknown_step.step.claimed_by is None
    response = bob.post(f"/queue/{unknown_step.run_id}/2/claim", follow=True)
    assert "You claimed this item." in _messages(response)
    assert AuditEntry.objects.filter(action="step.release").count() == 1
    bob.post(f"/queue/{unknown_step.run_id}/2/release")
    alice.post(f"/queue/{unknown_step.run_id}/2/claim")
    assert getattr(unknown_step.step.claimed_by, "username", None) == "alice"
    # alice's claim expires: bob may now resolve
    Step.objects.filter(pk=unknown_step.step.pk).update(
        claim_expires_at=unknown_step.step.intent_at
    )
    response = _resolve(bob, unknown_step, action="sent", note="bob checked")
    assert unknown_step.step.resolution_by == "bob"
    assert unknown_step.step.claimed_by is None


@pytest.mark.django_db
def test_resolution_and_its_audit_entry_commit_together(unknown_step, monkeypatch):
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("audit store down")

    monkeypatch.setattr(resolutions, "audit_record", broken)
    client = _client(SUPERVISORS)
    client.raise_request_exception = False
    response = client.post(
        f"/queue/{unknown_step.run_id}/2/resolve", {"action": "sent", "note": "x"}
    )
    assert response.status_code == 500
    assert unknown_step.step.state == StepState.UNKNOWN
    assert unknown_step.run.status == RunStatus.NEEDS_REVIEW


@pytest.mark.django_db
def test_a_crash_looped_run_waits_in_the_queue_and_resumes_with_a_note(groups):
    run = crash_looped_run()
    client = _client(SUPERVISORS)
    queue = client.get("/queue/")
    assert str(run.pk)[:8] in queue.content.decode()
    assert b"recoveries" in queue.content
    response = client.post(f"/runs/{run.pk}/decide", {"action": "resume", "note": ""}, follow=True)
    assert any("A note is required" in m for m in _messages(response))
    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_REVIEW
    response = client.post(
        f"/runs/{run.pk}/decide", {"action": "resume", "note": "fixed upstream"}, follow=True
    )
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert AuditEntry.objects.get(action="run.review.resume").note == "fixed upstream"


@pytest.mark.django_db
def test_raising_limits_only_raises_and_is_audited(unknown_step):
    client = _client(ADMINS)
    limit = unknown_step.run.limit_steps
    response = client.post(
        f"/runs/{unknown_step.run_id}/limits", {"steps": "1", "note": "lower"}, follow=True
    )
    assert any("Limits can only be raised" in m for m in _messages(response)), _messages(response)
    response = client.post(
        f"/runs/{unknown_step.run_id}/limits", {"steps": "500", "note": ""}, follow=True
    )
    assert any("A note is required" in m for m in _messages(response))
    assert unknown_step.run.limit_steps == limit
    assert not AuditEntry.objects.exists()
    client.post(f"/runs/{unknown_step.run_id}/limits", {"steps": "500", "note": "long ticket"})
    assert unknown_step.run.limit_steps == 500
    entry = AuditEntry.objects.get(action="run.limits.raise")
    assert entry.details["before"]["limit_steps"] == str(limit)
    assert Event.objects.filter(run_id=unknown_step.run_id, type="limits_raised").count() == 1


@pytest.mark.django_db
def test_a_retry_of_a_step_nobody_enforces_needs_the_may_happen_twice_confirmation(unknown_step):
    """First use: "Retry (same key)" on email.send (enforced by nobody) mailed the customer a
    second time, with no warning. Now the retry is refused until the supervisor confirms."""
    events = Event.objects.filter(run_id=unknown_step.run_id).count()
    client = _client(SUPERVISORS)
    page = client.get(f"/queue/{unknown_step.run_id}/2/").content.decode()
    assert "Retry (may happen twice)" in page and 'id="confirm-repeat"' in page
    refused = _resolve(client, unknown_step, action="retry", note="not in the log")
    assert any("may make its effect happen twice" in m for m in _messages(refused))
    _unchanged(unknown_step, events)
    _resolve(client, unknown_step, action="retry", note="not in the log", confirm_repeat="on")
    assert unknown_step.step.state == StepState.INTERRUPTED
    entry = AuditEntry.objects.get(action="step.resolve.retry")
    assert entry.details["confirmed_may_repeat"] is True
