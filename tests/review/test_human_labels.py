"""What the desk shows reads as words: one ticket identifier with its subject, statuses without
underscores, and a step that is not waiting says what it is instead of "This step is intent"."""

import re
from typing import Any

import pytest

from dashboard.roles import SUPERVISORS
from runs.services.creation import run_create
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record
from tests.review.factories import killed_support_run
from tools.models import Ticket

pytestmark = pytest.mark.django_db


def test_the_item_names_its_ticket_once_with_its_subject(client_for: Any) -> None:
    Ticket.objects.create(
        id=41, customer="ada@example.com", subject="Refund", body="Customer asks a refund"
    )
    item = killed_support_run()

    page = client_for(SUPERVISORS).get(f"/queue/{item.run_id}/{item.index}/").content.decode()

    ticket = re.search(r'id="concerned-ticket">(.*?)</dd>', page, re.S)
    assert ticket, "the item names the ticket its step concerns"
    assert ticket.group(1) == "#41 — “Refund”, open"


def test_statuses_read_as_words(client_for: Any) -> None:
    item = killed_support_run()
    client = client_for(SUPERVISORS)

    runs = client.get("/").content.decode()
    run = client.get(f"/runs/{item.run_id}/").content.decode()

    assert ">needs review</span>" in runs and ">needs_review</span>" not in runs
    assert 'id="run-status">needs review</span>' in run


def test_a_step_under_way_says_so_instead_of_this_step_is_intent(client_for: Any) -> None:
    run, _ = run_create(agent="support", input={}, actor="worker:w-1")
    epoch = run_lease_acquire(run_id=run.pk, worker="w-1", ttl_seconds=30, actor="w-1").epoch
    step_intent_record(
        run_id=run.pk,
        epoch=epoch,
        index=0,
        kind="tool",
        name="tickets.create",
        effect="write",
        enforced_by="ledger",
        arguments={"customer": "ada@example.com", "subject": "s", "body": "b"},
        actor="worker:w-1",
    )

    page = client_for(SUPERVISORS).get(f"/queue/{run.pk}/0/").content.decode()

    assert "This step is under way: its intent is journalled and no outcome yet" in page
    assert "This step is <span" not in page
