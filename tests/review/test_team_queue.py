"""A queue for a team: who and what each item concerns, assignment, decisions in bulk, claims
that expire in sight, and escalations that reach someone (mail, or a signed webhook)."""

import hashlib
import hmac
import http.server
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.test import Client

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, SUPERVISORS
from review.models import EscalationWebhook, WebhookDelivery
from review.services.claims import review_step_claim
from review.services.escalations import review_items_escalate
from review.services.webhooks import WebhookFailed, webhook_deliver
from review.tasks import deliver_webhook
from runs import clock
from runs.constants import StepState
from runs.models import Step
from tests.review.factories import killed_support_run, run_awaiting_approval, user_in

pytestmark = pytest.mark.django_db


def _client(group: str, username: str, email: str = "") -> Client:
    client = Client()
    client.force_login(user_in(group, username, email=email))
    return client


def test_the_queue_shows_customer_ticket_and_external_id(groups: Any) -> None:
    item = killed_support_run(external_id="ticket:T-1004", customer="grace@example.com")
    page = _client(SUPERVISORS, "sam").get("/queue/").content.decode()
    row = page.split(f'data-step="{item.run_id}#2"')[1].split("</tr>")[0]
    assert "grace@example.com" in row and "help desk #41" in row and "ticket:T-1004" in row


def test_an_expired_claim_is_shown_as_expired(groups: Any) -> None:
    item = killed_support_run()
    review_step_claim(user=user_in(SUPERVISORS, "kim"), run_id=item.run_id, index=2)
    Step.objects.filter(run_id=item.run_id, index=2).update(
        claim_expires_at=clock.now() - timedelta(minutes=1)
    )
    page = _client(SUPERVISORS, "sam").get("/queue/").content.decode()
    assert "kim&#x27;s claim expired" in page or "kim's claim expired" in page


def test_assign_and_reassign_are_audited_with_who_had_it(groups: Any) -> None:
    item = killed_support_run()
    user_in(SUPERVISORS, "kim")
    user_in(SUPERVISORS, "lee")
    sam = _client(SUPERVISORS, "sam")
    sam.post(f"/queue/{item.run_id}/2/assign", {"assignee": "kim"})
    assert Step.objects.get(run_id=item.run_id, index=2).claimed_by_id == user_in(None, "kim").pk
    sam.post(f"/queue/{item.run_id}/2/assign", {"assignee": "lee"})
    assert Step.objects.get(run_id=item.run_id, index=2).claimed_by_id == user_in(None, "lee").pk
    details = [e.details for e in AuditEntry.objects.filter(action="step.assign").order_by("at")]
    assert [(d["from"], d["to"]) for d in details] == [(None, "kim"), ("kim", "lee")]
    refused = sam.post(
        f"/queue/{item.run_id}/2/assign", {"assignee": "nobody"}, HTTP_HX_REQUEST="true"
    )
    assert "nobody cannot decide review items" in refused.content.decode()


def test_five_items_of_the_same_tool_are_decided_at_once_one_entry_each(groups: Any) -> None:
    items = [killed_support_run(customer=f"c{n}@example.com") for n in range(5)]
    sam = _client(SUPERVISORS, "sam")
    response = sam.post(
        "/queue/bulk",
        {
            "items": [f"{i.run_id}#2" for i in items],
            "action": "sent",
            "note": "All five are in the SMTP log",
        },
        follow=True,
    )
    assert "5 items decided: sent." in response.content.decode()
    assert all(i.step.state == StepState.DONE for i in items)
    entries = AuditEntry.objects.filter(action="step.resolve.sent")
    assert entries.count() == 5
    assert {e.note for e in entries} == {"All five are in the SMTP log"}


def test_bulk_refuses_items_that_do_not_belong_together_and_changes_nothing(
    groups: Any,
) -> None:
    unknown = killed_support_run()
    waiting = run_awaiting_approval(agent="other")
    response = _client(SUPERVISORS, "sam").post(
        "/queue/bulk",
        {
            "items": [f"{unknown.run_id}#2", f"{waiting.run_id}#1"],
            "action": "sent",
            "note": "x",
        },
        follow=True,
    )
    assert "same tool in the same situation" in response.content.decode()
    assert unknown.step.state == StepState.UNKNOWN
    assert not AuditEntry.objects.filter(action__startswith="step.resolve").exists()


def test_a_banner_says_when_nobody_can_be_notified(groups: Any) -> None:
    killed_support_run()
    page = _client(SUPERVISORS, "sam").get("/queue/").content.decode()
    assert 'id="nobody-notified"' in page
    user_in(SUPERVISORS, "kim", email="kim@example.com")
    page = _client(SUPERVISORS, "sam").get("/queue/").content.decode()
    assert 'id="nobody-notified"' not in page


def test_a_webhook_url_that_is_not_http_is_a_form_error(groups: Any) -> None:
    admin = _client(ADMINS, "ada")
    refused = admin.post("/notifications/", {"url": "ftp://hooks.example/x", "secret": "s"})
    assert refused.status_code == 400
    assert "starts with http:// or https://" in refused.content.decode()
    assert not EscalationWebhook.objects.exists()
    admin.post("/notifications/", {"url": "https://hooks.example/x", "secret": "s"})
    assert EscalationWebhook.objects.count() == 1
    assert AuditEntry.objects.filter(action="webhook.create").count() == 1


class Receiver(http.server.BaseHTTPRequestHandler):
    """A local Slack-like receiver: the first post gets 500, later ones 200."""

    answers: list[int] = []
    received: list[tuple[bytes, str]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((body, self.headers["X-Agent-Ledger-Signature"]))
        status = self.answers.pop(0) if self.answers else 200
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.answers = [500]
    Receiver.received = []
    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()


def test_an_escalation_is_posted_signed_and_retried_after_a_500(
    groups: Any, receiver: str, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.REVIEW_SLA_SECONDS = 60
    user_in(SUPERVISORS, "kim", email="kim@example.com")
    EscalationWebhook.objects.create(url=receiver, secret="s3cret")
    item = killed_support_run()
    Step.objects.filter(run_id=item.run_id, index=2).update(
        intent_at=clock.now() - timedelta(minutes=5)
    )
    with django_capture_on_commit_callbacks(execute=False) as queued:
        assert review_items_escalate() == 1
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["kim@example.com"]
    delivery = WebhookDelivery.objects.get()
    assert len(queued) == 1  # one delivery task, sent after commit
    # the task as Celery runs it: the 500 fails the attempt (Celery retries with backoff) ...
    assert getattr(deliver_webhook, "autoretry_for", None) == (WebhookFailed,)
    assert getattr(deliver_webhook, "retry_backoff", None)
    with pytest.raises(WebhookFailed):
        webhook_deliver(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert (delivery.attempts, delivery.delivered_at, delivery.last_error) == (1, None, "HTTP 500")
    # ... and the retry lands
    assert deliver_webhook.apply(args=(delivery.pk,)).get() is True
    delivery.refresh_from_db()
    assert delivery.attempts == 2 and delivery.delivered_at is not None
    body, signature = Receiver.received[-1]
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert signature == expected
    text = json.loads(body)["text"]
    assert "email.send" in text and f"/queue/{item.run_id}/2/" in text


def test_after_a_decision_the_whole_item_page_shows_the_new_state(groups: Any) -> None:
    """First use: the decision box said "resolved" while the card beside it still said the run
    was needs_review; the htmx answer now updates the run status and the summary too."""
    item = killed_support_run()
    response = _client(SUPERVISORS, "sam").post(
        f"/queue/{item.run_id}/2/resolve",
        {"action": "sent", "note": "in the log"},
        HTTP_HX_REQUEST="true",
    )
    body = response.content.decode()
    assert 'id="item-run-status" class="badge s-running" hx-swap-oob="true">running<' in body
    assert 'id="evidence-summary"' in body and "now done" in body


def test_the_queue_costs_the_same_queries_for_2_and_8_items_of_both_kinds(groups: Any) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = _client(SUPERVISORS, "sam")

    def count() -> int:
        client.get("/queue/")
        with CaptureQueriesContext(connection) as ctx:
            assert client.get("/queue/").status_code == 200
        return len(ctx.captured_queries)

    killed_support_run()
    run_awaiting_approval(agent="a0")
    small = count()
    for n in range(3):
        killed_support_run()
        run_awaiting_approval(agent=f"a{n + 1}")
    assert count() == small
