"""The review desk decides steps that wait for approval, and keeps its rules; each audited."""

from typing import Any

import pytest
from django.test import Client

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, AUDITORS, SUPERVISORS
from runs.constants import StepState
from runs.models import ApprovalRule, Event
from tests.review.factories import run_awaiting_approval, user_in

pytestmark = pytest.mark.django_db


def _client(group: str, username: str) -> Client:
    client = Client()
    client.force_login(user_in(group, username))
    return client


def test_the_queue_shows_the_waiting_write_as_approve_before_it_runs() -> None:
    waiting = run_awaiting_approval()
    page = _client(SUPERVISORS, "sam").get("/queue/").content.decode()
    assert f'data-step="{waiting.run_id}#1"' in page
    assert "approve before it runs" in page
    item = _client(SUPERVISORS, "sam").get(f"/queue/{waiting.run_id}/1/").content.decode()
    assert "Approve before it runs" in item and 'id="approve"' in item


def test_one_approval_from_the_desk_lets_the_step_run_and_is_audited() -> None:
    waiting = run_awaiting_approval()
    response = _client(SUPERVISORS, "sam").post(
        f"/queue/{waiting.run_id}/1/approve", {"note": "checked the address"}, follow=True
    )
    assert response.status_code == 200
    assert waiting.step.state == StepState.INTENT
    entry = AuditEntry.objects.get(action="step.approve")
    assert entry.note == "checked the address" and entry.actor_name == "sam"


def test_two_approvers_the_same_person_twice_is_refused_naming_when() -> None:
    waiting = run_awaiting_approval(approvals=2)
    sam = _client(SUPERVISORS, "sam")
    sam.post(f"/queue/{waiting.run_id}/1/approve", {})
    again = sam.post(f"/queue/{waiting.run_id}/1/approve", {}, HTTP_HX_REQUEST="true")
    text = again.content.decode()
    assert "You approved this step at" in text and "2 different people" in text
    assert waiting.step.state == StepState.AWAITING_APPROVAL
    _client(SUPERVISORS, "kim").post(f"/queue/{waiting.run_id}/1/approve", {})
    assert waiting.step.state == StepState.INTENT
    assert AuditEntry.objects.filter(action="step.approve").count() == 2


def test_deny_needs_a_note_then_stops_the_step_and_a_late_approval_names_who_denied() -> None:
    waiting = run_awaiting_approval()
    sam = _client(SUPERVISORS, "sam")
    empty = sam.post(f"/queue/{waiting.run_id}/1/deny", {"note": ""}, HTTP_HX_REQUEST="true")
    assert "A note is required to deny" in empty.content.decode()
    assert waiting.step.state == StepState.AWAITING_APPROVAL
    sam.post(f"/queue/{waiting.run_id}/1/deny", {"note": "wrong customer"})
    step = waiting.step
    assert (step.state, step.resolution_action, step.resolution_by) == (
        StepState.DENIED,
        "deny",
        "sam",
    )
    late = _client(SUPERVISORS, "kim").post(
        f"/queue/{waiting.run_id}/1/approve", {}, HTTP_HX_REQUEST="true"
    )
    assert "sam already denied this step at" in late.content.decode()
    page = _client(SUPERVISORS, "kim").get(f"/queue/{waiting.run_id}/1/").content.decode()
    assert "Denied by" in page and "wrong customer" in page
    assert Event.objects.filter(run_id=waiting.run_id, type="step_denied").count() == 1


def test_an_auditor_sees_the_item_but_cannot_decide() -> None:
    waiting = run_awaiting_approval()
    auditor = _client(AUDITORS, "ann")
    assert 'id="read-only"' in auditor.get(f"/queue/{waiting.run_id}/1/").content.decode()
    assert auditor.post(f"/queue/{waiting.run_id}/1/approve", {}).status_code == 403
    assert waiting.step.state == StepState.AWAITING_APPROVAL


def test_admins_keep_approval_rules_audited_and_bad_input_is_a_form_error() -> None:
    admin = _client(ADMINS, "ada")
    created = admin.post(
        "/approval-rules/new",
        {"agent": "support", "tool_pattern": "tickets.close", "approvals_required": 2},
    )
    assert created.status_code == 302
    rule = ApprovalRule.objects.get(tool_pattern="tickets.close")
    assert (rule.agent, rule.approvals_required, rule.created_by) == ("support", 2, "ada")
    assert AuditEntry.objects.filter(action="approval_rule.create").count() == 1
    page = admin.get("/approval-rules/").content.decode()
    assert "tickets.close" in page and "2 different people" in page
    bad: dict[str, Any] = {
        "agent": "",
        "tool_pattern": "email.*",
        "approvals_required": 1,
        "expires_after_seconds": 5,
    }
    refused = admin.post("/approval-rules/new", bad)
    assert refused.status_code == 400
    assert "at least 60 seconds" in refused.content.decode(), refused.context["form"].errors
    assert _client(SUPERVISORS, "sam").get("/approval-rules/").status_code == 403


def test_a_refused_decision_over_htmx_is_a_409_that_the_page_swaps_in() -> None:
    waiting = run_awaiting_approval(approvals=2)
    sam = _client(SUPERVISORS, "sam")
    sam.post(f"/queue/{waiting.run_id}/1/approve", {})

    again = sam.post(f"/queue/{waiting.run_id}/1/approve", {}, HTTP_HX_REQUEST="true")

    assert again.status_code == 409  # a conflict says so, to htmx as to anyone
    assert "You approved this step at" in again.content.decode()
    assert "queue-changed" in again["HX-Trigger"]
    page = sam.get(f"/queue/{waiting.run_id}/1/").content.decode()
    assert '{"code": "409", "swap": true, "error": false}' in page  # the page swaps it in
