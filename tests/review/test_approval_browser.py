"""Approve before it runs, in a real browser (Debian Chromium via Playwright, a live server).

Each story starts from the support agent wanting to email a customer (step 1, email.send) while
a rule for `email.*` holds it: nothing has been sent; people decide whether it runs.
"""

from datetime import timedelta
from typing import Any

import httpx
import pytest

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, SUPERVISORS
from runs import clock
from runs.constants import StepState
from runs.models import ApprovalRequest, ApprovalRule, Event
from runs.services.enforcement import run_lease_expire
from runs.tokens import worker_token_create
from tests.review.browser import shot, signed_in
from tests.review.factories import WaitingStep, run_awaiting_approval, user_in

pytestmark = pytest.mark.django_db(transaction=True)


class Pod:
    """The worker side over the real worker API."""

    def __init__(self, base: str, name: str = "w-9") -> None:
        _, raw = worker_token_create(name=f"pod-{name}")
        self.http = httpx.Client(
            base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {raw}"}, timeout=10
        )
        self.name = name

    def lease(self, run_id: str) -> dict[str, Any]:
        grant = self.http.post(
            f"/runs/{run_id}/lease", json={"worker": self.name, "ttl_seconds": 30}
        )
        assert grant.status_code == 200, grant.text
        body: dict[str, Any] = grant.json()
        return body

    def email_intent(self, waiting: WaitingStep, epoch: int) -> httpx.Response:
        step = waiting.step
        return self.http.post(
            f"/runs/{waiting.run_id}/steps/",
            json={
                "epoch": epoch,
                "index": 1,
                "kind": "tool",
                "name": "email.send",
                "effect": "write",
                "enforced_by": "nobody",
                "arguments": step.arguments,
            },
        )

    def sent(self, waiting: WaitingStep, epoch: int) -> None:
        outcome = self.http.post(
            f"/runs/{waiting.run_id}/steps/1/outcome",
            json={"epoch": epoch, "status": "ok", "result": {"email": {"id": 7}}},
        )
        assert outcome.status_code == 200, outcome.text


def _open_from_queue(page: Any, base: str, waiting: WaitingStep) -> None:
    page.goto(f"{base}/queue/")
    row = page.locator(f'tr[data-step="{waiting.run_id}#1"]')
    assert "approve before it runs" in row.inner_text()
    row.locator("text=Open").click()
    page.wait_for_url(f"{base}/queue/{waiting.run_id}/1/")


def test_two_supervisors_approve_and_the_waiting_worker_sends_once(browser, review_server):
    base = review_server
    user_in(SUPERVISORS, "sam")
    user_in(SUPERVISORS, "kim")
    waiting = run_awaiting_approval(approvals=2)
    pod = Pod(base, "w-7")
    sam = signed_in(browser, base, "sam")
    _open_from_queue(sam, base, waiting)
    shot(sam, "approve-before-it-runs")
    assert "two different people" in sam.locator("#decision").inner_text()
    sam.fill("#note", "Address matches the ticket.")
    sam.click("#approve")
    sam.locator("#decision-ok").wait_for()
    assert "one more is needed" in sam.locator("#decision-ok").inner_text()
    assert sam.locator("#approve").is_disabled()
    assert waiting.step.state == StepState.AWAITING_APPROVAL
    # the worker still waits: its replayed intent is 202
    assert pod.email_intent(waiting, waiting.epoch).status_code == 202

    kim = signed_in(browser, base, "kim")
    kim.goto(f"{base}/queue/{waiting.run_id}/1/")
    assert "Approved by sam" in kim.locator("#approvals-given").inner_text()
    kim.click("#approve")
    kim.locator("#decision-ok").wait_for()
    assert "approved" in kim.locator("#decision-ok").inner_text()
    # sam's open page follows without a reload
    sam.locator("#decision", has_text="nothing to decide").wait_for()

    taken = pod.email_intent(waiting, waiting.epoch)
    assert taken.status_code == 200 and taken.json()["state"] == "intent"
    pod.sent(waiting, waiting.epoch)
    step = waiting.step
    assert (step.state, step.executions) == (StepState.DONE, 1)
    assert AuditEntry.objects.filter(action="step.approve").count() == 2


def test_a_worker_killed_while_waiting_resumes_and_sends_the_approved_email_once(
    browser, review_server
):
    base = review_server
    user_in(SUPERVISORS, "sam")
    waiting = run_awaiting_approval(ttl_seconds=5)
    # the pod dies while it waits; its lease runs out and the reaper interrupts the run
    later = clock.now() + timedelta(seconds=6)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(clock, "now", lambda: later)
        run_lease_expire(run_id=waiting.run_id)
    assert waiting.run.status == "interrupted"
    assert waiting.step.state == StepState.AWAITING_APPROVAL  # still waiting for people

    sam = signed_in(browser, base, "sam")
    _open_from_queue(sam, base, waiting)
    sam.click("#approve")
    sam.locator("#decision-ok").wait_for()

    pod = Pod(base, "w-8")
    grant = pod.lease(waiting.run_id)
    states = {s["index"]: s["state"] for s in grant["journal"]}
    assert states == {0: "done", 1: "interrupted"}  # approved, never taken: it did not run
    assert pod.email_intent(waiting, grant["epoch"]).status_code == 201
    pod.sent(waiting, grant["epoch"])
    step = waiting.step
    assert (step.state, step.executions) == (StepState.DONE, 1)
    assert Event.objects.filter(run_id=waiting.run_id, type="step_done").count() == 2


def test_a_denied_email_is_never_sent(browser, review_server):
    base = review_server
    user_in(SUPERVISORS, "sam")
    waiting = run_awaiting_approval()
    pod = Pod(base, "w-7")
    sam = signed_in(browser, base, "sam")
    _open_from_queue(sam, base, waiting)
    sam.click("#deny")  # no note: refused, nothing changes
    sam.locator("#decision-error").wait_for()
    assert "A note is required to deny" in sam.locator("#decision-error").inner_text()
    sam.fill("#note", "Wrong customer: this ticket belongs to someone else.")
    sam.click("#deny")
    sam.locator("#resolved-by").wait_for()
    assert "Denied by sam" in sam.locator("#resolved-by").inner_text()
    shot(sam, "approval-denied")
    refused = pod.email_intent(waiting, waiting.epoch)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "approval_denied"
    assert waiting.step.state == StepState.DENIED


def test_an_approval_nobody_gave_in_time_expires(browser, review_server):
    base = review_server
    user_in(SUPERVISORS, "sam")
    waiting = run_awaiting_approval(expires_after_seconds=600)
    sam = signed_in(browser, base, "sam")
    _open_from_queue(sam, base, waiting)
    assert "Expires at" in sam.locator("#approvals-given").inner_text()
    ApprovalRequest.objects.filter(step__run_id=waiting.run_id).update(
        expires_at=clock.now() - timedelta(seconds=1)
    )
    sam.click("#approve")
    sam.locator("#decision-error").wait_for()
    assert "expired" in sam.locator("#decision-error").inner_text()
    assert "Expired: nobody approved it in time" in sam.locator("#resolved-by").inner_text()
    step = waiting.step
    assert (step.state, step.resolution_action) == (StepState.DENIED, "expire")


def test_an_admin_adds_an_approval_rule(browser, review_server):
    base = review_server
    user_in(ADMINS, "ada")
    page = signed_in(browser, base, "ada")
    page.click("nav >> text=Budget policies")
    page.click("#approval-rules-link")
    page.click("text=New rule")
    page.fill("input[name=agent]", "support")
    page.fill("input[name=tool_pattern]", "email.*")
    page.select_option("select[name=approvals_required]", "2")
    page.fill("input[name=expires_after_seconds]", "30")
    page.click("main button[type=submit]")
    assert "at least 60 seconds" in page.locator("main").inner_text()
    page.fill("input[name=expires_after_seconds]", "3600")
    page.click("main button[type=submit]")
    page.wait_for_url(f"{base}/approval-rules/")
    assert "2 different people" in page.locator("#approval-rules").inner_text()
    shot(page, "approval-rules")
    rule = ApprovalRule.objects.get(tool_pattern="email.*")
    assert (rule.approvals_required, rule.expires_after_seconds) == (2, 3600)


def test_a_note_being_typed_survives_another_supervisor_claiming_the_item(browser, review_server):
    """First use: the 5-second refresh erased a half-typed note when someone else claimed."""
    from tests.review.factories import killed_support_run

    base = review_server
    user_in(SUPERVISORS, "alice")
    user_in(SUPERVISORS, "bob")
    item = killed_support_run()
    alice = signed_in(browser, base, "alice")
    bob = signed_in(browser, base, "bob")
    alice.goto(f"{base}/queue/{item.run_id}/2/")
    alice.fill("#note", "Checking the SMTP log, half way through")
    bob.goto(f"{base}/queue/{item.run_id}/2/")
    bob.click("text=Claim this item")
    bob.locator("#decision-ok").wait_for()
    # alice's page refreshes (every 5 s) and shows the claim; her text stays
    alice.locator("#decision", has_text="bob").wait_for()
    assert alice.locator("#note").input_value() == "Checking the SMTP log, half way through"


def test_the_header_fits_a_390_px_phone(browser, review_server):
    base = review_server
    user_in(ADMINS, "ada")
    page = signed_in(browser, base, "ada", viewport=(390, 800))
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width
    for name in ("Runs", "Review queue", "Log out"):
        box = page.locator(f"header >> text={name}").first.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390 + 1, (name, box)
    shot(page, "phone-header")


def test_a_supervisor_decides_five_emails_at_once(browser, review_server):
    from tests.review.factories import killed_support_run

    base = review_server
    user_in(SUPERVISORS, "sam")
    items = [killed_support_run(customer=f"c{n}@example.com") for n in range(5)]
    page = signed_in(browser, base, "sam")
    page.goto(f"{base}/queue/")
    for item in items:
        page.check(f'[id="pick-{item.run_id}-2"]')
    page.fill("#bulk-note", "All five are in the provider's delivery log.")
    shot(page, "bulk-decision")
    page.click("#bulk-submit")
    page.locator("#messages", has_text="5 items decided: sent.").wait_for()
    assert page.locator("#queue-empty").is_visible()
    assert all(item.step.state == StepState.DONE for item in items)
    assert AuditEntry.objects.filter(action="step.resolve.sent").count() == 5


def test_an_admin_sets_up_a_webhook_and_an_escalation_reaches_it_signed_after_a_500(
    browser, review_server, settings, monkeypatch
):
    import hashlib
    import hmac
    import http.server
    import json
    import threading

    from review.models import WebhookDelivery
    from review.services.escalations import review_items_escalate
    from review.services.webhooks import WebhookFailed, webhook_deliver
    from review.tasks import deliver_webhook
    from runs.models import Step
    from tests.review.factories import killed_support_run

    received: list[tuple[bytes, str]] = []
    answers = [500]

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((body, self.headers["X-Agent-Ledger-Signature"]))
            self.send_response(answers.pop(0) if answers else 200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{server.server_address[1]}/slack"
    try:
        base = review_server
        user_in(ADMINS, "ada")
        page = signed_in(browser, base, "ada")
        item = killed_support_run()
        page.goto(f"{base}/queue/")
        assert page.locator("#nobody-notified").is_visible()
        page.click("text=Set up notifications")
        page.fill("input[name=url]", "ftp://hooks.example/x")
        page.fill("input[name=secret]", "s3cret")
        page.click("#webhook-form button[type=submit]")
        assert "starts with http:// or https://" in page.locator("main").inner_text()
        page.fill("input[name=url]", hook)
        page.fill("input[name=secret]", "s3cret")
        page.click("#webhook-form button[type=submit]")
        page.wait_for_url(f"{base}/notifications/")
        assert hook in page.locator("#webhooks").inner_text()
        shot(page, "notifications")
        page.goto(f"{base}/queue/")
        assert page.locator("#nobody-notified").count() == 0

        settings.REVIEW_SLA_SECONDS = 60
        Step.objects.filter(run_id=item.run_id, index=2).update(
            intent_at=clock.now() - timedelta(minutes=5)
        )
        queued: list[int] = []  # the task is run below, not sent to a shared broker
        monkeypatch.setattr(deliver_webhook, "delay_on_commit", queued.append)
        assert review_items_escalate() == 1
        delivery = WebhookDelivery.objects.get()
        assert queued == [delivery.pk]
        # what the Celery worker does: the 500 fails the first attempt, the retry lands
        with pytest.raises(WebhookFailed):
            webhook_deliver(delivery_id=delivery.pk)
        assert deliver_webhook.apply(args=(delivery.pk,)).get() is True
        assert len(received) == 2
        body, signature = received[-1]
        assert signature == "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
        assert f"/queue/{item.run_id}/2/" in json.loads(body)["text"]
    finally:
        server.shutdown()
