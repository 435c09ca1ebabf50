"""Escalation webhooks as an admin runs them: added once per URL, turned off and on, tested,
removed; delivered within a deadline from a queue of their own; only to public addresses; and
the text a worker chose reaches Slack as text, never as markup."""

import http.server
import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.test import Client

from config.celery import app as celery_app
from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, SUPERVISORS
from review.models import EscalationWebhook, WebhookDelivery
from review.services.escalations import review_items_escalate
from review.services.webhooks import WebhookFailed, webhook_deliver
from review.tasks import deliver_webhook
from runs import clock
from runs.models import Step
from tests.review.factories import killed_support_run, user_in

pytestmark = pytest.mark.django_db


class Receiver(http.server.BaseHTTPRequestHandler):
    """A local receiver: 200 at once, or (`trickle`) its answer one byte every half second."""

    trickle = 0
    received: list[bytes] = []

    def do_POST(self) -> None:
        self.received.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Length", str(self.trickle or 2))
        self.end_headers()
        if not self.trickle:
            self.wfile.write(b"ok")
            return
        for _ in range(self.trickle):
            try:
                self.wfile.write(b".")
                self.wfile.flush()
            except OSError:
                return  # the sender gave up
            time.sleep(0.5)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.trickle = 0
    Receiver.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()


def admin_client() -> Client:
    client = Client()
    client.force_login(user_in(ADMINS, "ada"))
    return client


def test_a_receiver_that_trickles_its_answer_is_cut_off_at_the_delivery_deadline(
    groups: Any, receiver: str, settings: Any
) -> None:
    settings.WEBHOOK_DELIVERY_SECONDS = 1
    Receiver.trickle = 40  # 20 s of answer, each byte well within any per-read timeout
    webhook = EscalationWebhook.objects.create(url=receiver, secret="s")
    delivery = WebhookDelivery.objects.create(
        webhook=webhook, body='{"text":"x"}', created_at=clock.now()
    )
    with pytest.raises(WebhookFailed, match="no complete answer within 1 s"):
        webhook_deliver(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert delivery.delivered_at is None and delivery.attempts == 1
    assert delivery.last_error == "no complete answer within 1 s"


def test_deliveries_go_to_their_own_queue_not_the_one_agents_run_on(settings: Any) -> None:
    route = celery_app.amqp.router.route({}, deliver_webhook.name)
    assert route["queue"].name == settings.WEBHOOK_QUEUE == "webhooks"
    agents = celery_app.amqp.router.route({}, "agents.run_agent")
    assert agents["queue"].name == "celery"


def test_escalation_text_passes_no_slack_markup_from_a_step_name(
    groups: Any, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.REVIEW_SLA_SECONDS = 60
    EscalationWebhook.objects.create(url="https://hooks.example/x", secret="s")
    item = killed_support_run()
    Step.objects.filter(run_id=item.run_id, index=2).update(
        name="email.send <!channel> <https://evil.example|open the invoice> & co",
        intent_at=clock.now() - timedelta(minutes=5),
    )
    with django_capture_on_commit_callbacks(execute=False):
        assert review_items_escalate() == 1
    text = json.loads(WebhookDelivery.objects.get().body)["text"]
    assert "<!channel>" not in text and "<https://evil.example" not in text
    assert (
        "email.send &lt;!channel&gt; &lt;https://evil.example|open the invoice&gt; &amp; co" in text
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",  # the cloud's metadata service
        "http://127.0.0.1:5432/",  # the database's port
        "http://localhost:6379/",  # a name that resolves to loopback
        "http://10.0.0.7/hook",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
    ],
)
def test_admins_cannot_point_a_webhook_at_a_private_address(
    groups: Any, settings: Any, url: str
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE = False
    refused = admin_client().post("/notifications/", {"url": url, "secret": "s"})
    assert refused.status_code == 400
    assert "private, loopback or link-local" in refused.content.decode()
    assert not EscalationWebhook.objects.exists()


def test_a_public_address_is_accepted_and_private_ones_when_allowed(
    groups: Any, settings: Any
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE = False
    admin = admin_client()
    admin.post("/notifications/", {"url": "https://93.184.215.14/hook", "secret": "s"})
    assert EscalationWebhook.objects.filter(url="https://93.184.215.14/hook").exists()
    settings.WEBHOOK_ALLOW_PRIVATE = True
    admin.post("/notifications/", {"url": "http://127.0.0.1:9/hook", "secret": "s"})
    assert EscalationWebhook.objects.count() == 2


def test_delivery_checks_the_address_again(groups: Any, receiver: str, settings: Any) -> None:
    """A webhook added while allowed (or a name whose DNS answer changed since) is refused at
    delivery: nothing reaches the private address."""
    webhook = EscalationWebhook.objects.create(url=receiver, secret="s")
    delivery = WebhookDelivery.objects.create(
        webhook=webhook, body='{"text":"x"}', created_at=clock.now()
    )
    settings.WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(WebhookFailed, match="private, loopback or link-local"):
        webhook_deliver(delivery_id=delivery.pk)
    assert Receiver.received == []


def test_the_same_url_cannot_be_added_twice(groups: Any) -> None:
    admin = admin_client()
    admin.post("/notifications/", {"url": "https://hooks.example/x", "secret": "s"})
    again = admin.post("/notifications/", {"url": "https://hooks.example/x", "secret": "t"})
    assert again.status_code == 400
    assert "This URL has a webhook already" in again.content.decode()
    assert EscalationWebhook.objects.count() == 1
    with pytest.raises(IntegrityError), transaction.atomic():  # the database says so too
        EscalationWebhook.objects.create(url="https://hooks.example/x", secret="u")


def test_an_admin_tests_turns_off_and_removes_a_webhook(
    groups: Any, receiver: str, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    admin = admin_client()
    admin.post("/notifications/", {"url": receiver, "secret": "s3cret"})
    webhook = EscalationWebhook.objects.get()

    # send test: a signed post, delivered as Celery would, audited; the page says it landed
    with django_capture_on_commit_callbacks(execute=False) as queued:
        page = admin.post(f"/notifications/{webhook.pk}/test", follow=True).content.decode()
    assert f"Test post queued to {receiver}" in page
    assert len(queued) == 1
    delivery = WebhookDelivery.objects.get(webhook=webhook)
    assert deliver_webhook.apply(args=(delivery.pk,)).get() is True
    assert "Test from Agent Ledger, sent by ada" in json.loads(Receiver.received[-1])["text"]
    row = admin.get("/notifications/").content.decode().split(f'data-webhook="{webhook.pk}"')[1]
    assert "delivered" in row.split("</tr>")[0]
    assert AuditEntry.objects.filter(action="webhook.test", target=f"webhook:{webhook.pk}").exists()

    # turned off: escalations pass it by
    page = admin.post(
        f"/notifications/{webhook.pk}/active", {"active": "off"}, follow=True
    ).content.decode()
    assert f"Webhook {receiver} is off." in page and "no, turned off" in page
    settings.REVIEW_SLA_SECONDS = 60
    user_in(SUPERVISORS, "kim", email="kim@example.com")
    item = killed_support_run()
    Step.objects.filter(run_id=item.run_id, index=2).update(
        intent_at=clock.now() - timedelta(minutes=5)
    )
    with django_capture_on_commit_callbacks(execute=False):
        assert review_items_escalate() == 1  # the mail only
    assert WebhookDelivery.objects.filter(webhook=webhook).count() == 1  # the test's
    admin.post(f"/notifications/{webhook.pk}/active", {"active": "on"})
    webhook.refresh_from_db()
    assert webhook.active

    # removed
    page = admin.post(f"/notifications/{webhook.pk}/delete", follow=True).content.decode()
    assert f"Webhook {receiver} removed." in page
    assert not EscalationWebhook.objects.exists()
    actions = list(
        AuditEntry.objects.filter(target=f"webhook:{webhook.pk}")
        .order_by("at")
        .values_list("action", flat=True)
    )
    assert actions == [
        "webhook.create",
        "webhook.test",
        "webhook.disable",
        "webhook.enable",
        "webhook.delete",
    ]

    # a supervisor can do none of it
    supervisor = Client()
    supervisor.force_login(user_in(SUPERVISORS, "sam"))
    other = EscalationWebhook.objects.create(url="https://hooks.example/y", secret="s")
    assert supervisor.post(f"/notifications/{other.pk}/delete").status_code == 403
    assert EscalationWebhook.objects.filter(pk=other.pk).exists()
