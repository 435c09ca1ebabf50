"""The supervisor's day in a real browser (Debian Chromium via Playwright, a live server).

Each story starts from a killed support-agent run: the pod died after creating the ticket and
while sending the customer email, so step 2 (email.send, enforced by nobody) is `unknown`.
"""

from typing import Any

import pytest

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, AUDITORS, SUPERVISORS
from runs.constants import RunStatus, StepState
from runs.models import Step
from runs.services.creation import run_create
from runs.tokens import worker_token_create
from tests.review.browser import Worker, page_pool, shot, signed_in
from tests.review.factories import UnknownStep, killed_support_run, user_in

pytestmark = pytest.mark.django_db(transaction=True)


def _open_item_from_queue(page: Any, base: str, item: UnknownStep) -> None:
    page.click("nav >> text=Review queue")
    page.wait_for_url(f"{base}/queue/")
    row = page.locator(f'tr[data-step="{item.run_id}#{item.index}"]')
    row.locator("text=Open").click()
    page.wait_for_url(f"{base}/queue/{item.run_id}/{item.index}/")


def _worker(base: str) -> Worker:
    _, raw = worker_token_create(name="pod-9")
    return Worker(base, raw)


def test_supervisor_marks_the_email_as_sent_and_sees_the_run_complete(browser, review_server):
    base = review_server
    user_in(SUPERVISORS, "sam")
    item = killed_support_run(external_id="ticket-1001")
    page = signed_in(browser, base, "sam", through_the_form=True)
    assert page.locator("#nav-waiting").inner_text() == "1"
    shot(page, "runs-list")
    _open_item_from_queue(page, base, item)
    # a second tab keeps the queue open: it must empty itself without a reload
    queue_tab = page.context.new_page()
    queue_tab.goto(f"{base}/queue/")
    shot(queue_tab, "review-queue")
    assert queue_tab.locator(f'tr[data-step="{item.run_id}#2"]').count() == 1

    assert "ada@example.com" in page.locator("main").inner_text()
    shot(page, "review-item")
    page.fill("#note", "The SMTP log shows the refund email went out at 14:02.")
    page.fill("#result", '{"email": {"id": 5521, "message_id": "<refund@mail>"}}')
    page.click("button[value=sent]")
    page.locator("#resolved-by").wait_for()
    assert "Resolved as sent by sam" in page.locator("#resolved-by").inner_text()
    queue_tab.locator(f'tr[data-step="{item.run_id}#2"]').wait_for(state="detached")
    assert queue_tab.locator("#queue-empty").is_visible()

    page.goto(f"{base}/runs/{item.run_id}/")
    assert page.locator("#run-status").inner_text() == "running"
    _worker(base).finish(item.run_id)
    page.locator("#run-status", has_text="completed").wait_for()  # live update, no reload
    shot(page, "run-transcript")
    step = item.step
    assert (step.state, step.resolution_by) == (StepState.DONE, "sam")
    assert step.result == {"email": {"id": 5521, "message_id": "<refund@mail>"}}
    assert item.run.status == RunStatus.COMPLETED
    assert AuditEntry.objects.get(action="step.resolve.sent").actor_name == "sam"


def test_supervisor_sends_the_email_back_for_retry_and_the_run_completes(browser, review_server):
    base = review_server
    user_in(SUPERVISORS, "sam")
    item = killed_support_run()
    page = signed_in(browser, base, "sam")
    _open_item_from_queue(page, base, item)
    # nobody enforces email.send: the page says a retry may send it twice, and asks
    assert "its effect may happen twice" in page.locator("#retry-warning").inner_text()
    page.fill("#note", "Not in the SMTP log: send it again with the same key.")
    page.click("button[value=retry]")
    page.locator("#decision-error").wait_for()
    assert "may make its effect happen twice" in page.locator("#decision-error").inner_text()
    assert item.step.state == StepState.UNKNOWN
    # the typed note survived the refusal; confirming lets the retry through
    assert page.locator("#note").input_value().startswith("Not in the SMTP log")
    shot(page, "risky-retry-confirmation")
    page.check("#confirm-repeat")
    page.click("button[value=retry]")
    page.locator("#resolved-by").wait_for()
    assert "Resolved as retry by sam" in page.locator("#resolved-by").inner_text()
    assert item.step.state == StepState.INTERRUPTED
    entry = AuditEntry.objects.get(action="step.resolve.retry")
    assert entry.details["confirmed_may_repeat"] is True
    page.goto(f"{base}/runs/{item.run_id}/")
    _worker(base).finish(item.run_id)
    page.locator("#run-status", has_text="completed").wait_for()
    step = item.step
    assert step.state == StepState.DONE and step.executions == 2
    assert item.run.status == RunStatus.COMPLETED


def test_supervisor_abandons_and_the_run_ends(browser, review_server):
    base = review_server
    user_in(SUPERVISORS, "sam")
    item = killed_support_run()
    page = signed_in(browser, base, "sam")
    _open_item_from_queue(page, base, item)
    page.click("button[value=abandon]")  # no note: the browser's required check stops it
    assert item.step.state == StepState.UNKNOWN
    page.fill("#note", "The customer cancelled by phone.")
    page.click("button[value=abandon]")
    page.locator("#resolved-by").wait_for()
    assert "Resolved as abandon by sam" in page.locator("#resolved-by").inner_text()
    assert "abandoned" in page.locator("#decision").inner_text()
    assert item.run.status == RunStatus.ABANDONED
    refused = _worker(base).lease(item.run_id)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "run_finished"


def test_auditor_sees_no_resolve_buttons_and_a_forged_post_is_refused(browser, review_server):
    base = review_server
    user_in(AUDITORS, "audrey")
    item = killed_support_run()
    page = signed_in(browser, base, "audrey")
    _open_item_from_queue(page, base, item)
    assert page.locator("#read-only").is_visible()
    assert page.locator("button[value=sent]").count() == 0
    assert page.locator("#resolve-form").count() == 0
    csrf = page.locator("body").get_attribute("hx-headers")
    token = __import__("json").loads(csrf)["x-csrftoken"]
    forged = page.request.post(
        f"{base}/queue/{item.run_id}/2/resolve",
        form={"action": "sent", "note": "I should not be able to"},
        headers={"X-CSRFToken": token, "Referer": page.url},
    )
    assert forged.status == 403
    assert item.step.state == StepState.UNKNOWN
    assert not AuditEntry.objects.filter(action__startswith="step.resolve").exists()


def test_two_supervisors_resolve_the_same_step_and_one_sees_who_won(
    browser, review_server, settings
):
    # bob decides on the page as he loaded it: no poll may show him alice's decision first
    settings.DASHBOARD_POLL_SECONDS = 600
    base = review_server
    user_in(SUPERVISORS, "alice")
    user_in(SUPERVISORS, "bob")
    item = killed_support_run()
    alice = signed_in(browser, base, "alice")
    bob = signed_in(browser, base, "bob")
    for page in (alice, bob):
        page.goto(f"{base}/queue/{item.run_id}/2/")
    alice.fill("#note", "alice: seen in the SMTP log")
    bob.fill("#note", "bob: customer says no email")
    alice.click("button[value=sent]")
    alice.locator("#resolved-by").wait_for()
    bob.click("button[value=abandon]")
    bob.locator("#decision-error").wait_for()
    message = bob.locator("#decision-error").inner_text()
    assert message.startswith("alice already resolved this step as sent at ")
    assert "Resolved as sent by alice" in bob.locator("#resolved-by").inner_text()
    shot(bob, "second-resolution-refused")
    step = Step.objects.get(run_id=item.run_id, index=2)
    assert (step.resolution_by, step.resolution_action) == ("alice", "sent")
    assert item.run.status == RunStatus.RUNNING
    assert AuditEntry.objects.filter(action__startswith="step.resolve").count() == 1


def test_admin_pages_policies_tokens_and_audit_log(browser, review_server):
    base = review_server
    user_in(ADMINS, "root-admin")
    item = killed_support_run()
    page = signed_in(browser, base, "root-admin")
    page.click("nav >> text=Budget policies")
    page.click("text=New policy")
    page.fill("input[name=name]", "support-agent")
    page.fill("input[name=agent]", "support")
    page.fill("input[name=max_steps]", "0")
    page.fill("input[name=max_tokens]", "200000")
    page.fill("input[name=max_wall_seconds]", "1800")
    page.fill("input[name=max_recoveries]", "3")
    page.click("main button[type=submit]")
    assert "Must be at least 1." in page.locator("main").inner_text()
    page.fill("input[name=max_steps]", "25")
    page.click("main button[type=submit]")
    page.wait_for_url(f"{base}/policies/")
    assert "support-agent" in page.locator("table").inner_text()
    shot(page, "budget-policies")

    page.click("nav >> text=Worker tokens")
    page.fill("input[name=name]", "support-pod-3")
    page.click("text=Create token")
    raw = page.locator("#token-value").inner_text()
    assert len(raw) > 20
    shot(page, "worker-tokens", mask=("#token-value",))
    page.goto(f"{base}/tokens/")
    assert raw not in page.content()

    page.goto(f"{base}/runs/{item.run_id}/")
    page.click("#chain >> text=Verify")
    page.locator(".chain-ok").wait_for()
    assert "The chain holds" in page.locator("#verify").inner_text()
    page.fill("#limits input[name=steps]", "80")
    page.fill("#limits input[name=note]", "long refund thread")
    page.click("#limits button[type=submit]")
    page.locator("#messages", has_text="Limits raised").wait_for()

    page.click("nav >> text=Audit log")
    text = page.locator("main").inner_text()
    for action in ("policy.create", "token.create", "run.limits.raise"):
        assert action in text
    shot(page, "audit-log")


def test_login_page_screenshot(browser, review_server):
    page = page_pool(browser).take(viewport=(1360, 700))  # signed in as nobody
    page.goto(f"{review_server}/login/")
    path = shot(page, "login")
    assert path.stat().st_size > 0


def test_screenshots_of_a_busy_dashboard(browser, review_server):
    """Last, so the README's queue picture shows several waiting items of different customers."""
    user_in(SUPERVISORS, "sam")
    for n, customer in enumerate(["ada@example.com", "grace@example.com", "linus@example.com"]):
        killed_support_run(external_id=f"ticket-{2000 + n}", customer=customer)
    run_create(agent="search", input={"q": "refund policy"}, actor="worker:w-2")
    page = signed_in(browser, review_server, "sam")
    shot(page, "runs-list")
    page.click("nav >> text=Review queue")
    page.locator("tr[data-step]").nth(2).wait_for()
    assert page.locator("#nav-waiting").inner_text() == "3"
    shot(page, "review-queue")
