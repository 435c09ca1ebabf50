"""Evidence on every item: plain words per case, the tool side worded per enforcer, the worker,
every step before it, and similar past decisions (first-use findings, each failed before)."""

from typing import Any

import pytest
from django.test import Client

from dashboard.roles import SUPERVISORS
from runs.services.creation import run_create
from runs.services.decisions import step_resolve
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record
from tests.review.factories import _lost_lease, killed_support_run, run_awaiting_approval, user_in

pytestmark = pytest.mark.django_db


def _page(path: str) -> str:
    client = Client()
    client.force_login(user_in(SUPERVISORS, "sam"))
    return client.get(path).content.decode()


def test_an_email_nobody_can_see_into_reads_maybe_sent_never_absent(unknown_step: Any) -> None:
    page = _page(f"/queue/{unknown_step.run_id}/2/")
    assert "Maybe sent. The worker stopped while sending this email." in page
    assert "nobody knows whether the customer got it" in page
    assert "Check the mailbox or the provider, then decide." in page
    tool_side = page.split('id="evidence-tool-side">')[1].split("</dd>")[0]
    assert "absent" not in tool_side
    assert "cannot see into this tool" in tool_side


def test_the_item_names_the_worker_its_epoch_and_when_its_lease_ran_out(unknown_step: Any) -> None:
    page = _page(f"/queue/{unknown_step.run_id}/2/")
    worker = page.split('id="evidence-worker">')[1].split("</dd>")[0]
    assert "Worker w-7 held epoch 1" in worker
    assert "Its lease ran out at" in worker


def test_a_step_waiting_for_approval_says_nothing_happened_yet() -> None:
    waiting = run_awaiting_approval()
    page = _page(f"/queue/{waiting.run_id}/1/")
    assert "Nothing has happened yet. The agent asks before sending this email" in page


def test_steps_before_it_shows_every_step_not_the_last_ten() -> None:
    run, _ = run_create(agent="support", input={}, actor="worker:w-7")
    epoch = run_lease_acquire(run_id=run.pk, worker="w-7", ttl_seconds=5, actor="w").epoch
    for index in range(15):
        step_intent_record(
            run_id=run.pk,
            epoch=epoch,
            index=index,
            kind="model",
            name=f"model.step{index}",
            effect="read",
            arguments={"n": index},
            outcome={"status": "ok", "result": {"n": index}},
            actor="w",
        )
    step_intent_record(
        run_id=run.pk,
        epoch=epoch,
        index=15,
        kind="tool",
        name="email.send",
        effect="write",
        enforced_by="nobody",
        arguments={"to": "a@example.com"},
        actor="w",
    )
    _lost_lease(run.pk, 5)
    page = _page(f"/queue/{run.pk}/15/")
    assert "All 15 steps before it" in page
    assert "model.step0 " in page and "model.step14 " in page


def test_similar_past_decisions_show_what_people_decided_on_the_same_tool() -> None:
    earlier = killed_support_run(external_id="T-1000")
    step_resolve(run_id=earlier.run_id, index=2, action="sent", note="in the SMTP log", by="kim")
    now = killed_support_run(external_id="T-1001")
    page = _page(f"/queue/{now.run_id}/2/")
    similar = page.split('id="similar-decisions"')[1].split("</ul>")[0]
    assert "sent" in similar and "kim" in similar and "in the SMTP log" in similar


def test_a_step_the_tool_deduplicates_says_so(unknown_step: Any) -> None:
    from review.evidence import tool_side_words
    from runs.models import Step

    ticket = Step.objects.get(run_id=unknown_step.run_id, index=1)
    assert "deduplicates this key itself" in tool_side_words(ticket, None)
