"""A fork goes on under keys of its own, so a write the original already made after the fork
point would be made again: the fork is refused until an admin chose, per tool, to hold those
writes for a person's approval or to run them again, and the run page shows which writes and
where the fork will run (issue 36, finding 5)."""

import re
from html import unescape
from typing import Any

import pytest

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS
from runs.constants import EventType
from runs.models import Event, ForkFence, Run, Step
from runs.services.creation import run_create
from runs.services.finish import run_complete
from runs.services.leases import run_lease_acquire
from tools.gateway import gateway_step_run
from tools.models import Ticket, TicketComment

pytestmark = pytest.mark.django_db(transaction=True)


def gateway(run_id: Any, epoch: int, index: int, name: str, arguments: dict[str, Any]) -> Step:
    """One real gateway step, as `run.tool(name, arguments)` makes it."""
    return gateway_step_run(
        run_id=run_id,
        epoch=epoch,
        index=index,
        name=name,
        effect="write",
        enforced_by=None,
        arguments=arguments,
        actor="worker:w-1",
    ).step


def completed_with_a_comment() -> tuple[Run, Ticket]:
    """A support run that opened a ticket (step 0), commented on it (step 1) and completed."""
    run, _ = run_create(agent="support", input={"ticket": "T-1004"}, actor="worker:w-1")
    epoch = run_lease_acquire(run_id=run.pk, worker="w-1", ttl_seconds=30, actor="worker:w-1").epoch
    created = gateway(
        run.pk,
        epoch,
        0,
        "tickets.create",
        {"customer": "margaret@example.com", "subject": "Damaged", "body": "Cracked screen."},
    )
    assert isinstance(created.result, dict)
    ticket = Ticket.objects.get(pk=created.result["ticket"]["id"])
    gateway(run.pk, epoch, 1, "tickets.comment", {"ticket_id": ticket.pk, "body": "Replacing it."})
    run_complete(run_id=run.pk, epoch=epoch, output={"ok": True}, actor="worker:w-1")
    return run, ticket


def lease_fork(fork: Run) -> int:
    return run_lease_acquire(run_id=fork.pk, worker="w-2", ttl_seconds=30, actor="worker:w-2").epoch


def test_a_fork_holds_a_comment_the_original_made_unless_the_admin_chose_to_run_it_again(
    client_for: Any,
) -> None:
    original, ticket = completed_with_a_comment()
    assert TicketComment.objects.filter(ticket=ticket).count() == 1
    admin = client_for(ADMINS, username="ada")

    # without a choice: no fork, and the page shows what the original already wrote
    refused = admin.post(
        f"/console/runs/{original.pk}/fork", {"index": 1, "note": "what if"}, follow=True
    )
    assert not Run.objects.filter(forked_from=original).exists()
    text = unescape(refused.content.decode())
    assert "The original already wrote from step 1 on: tickets.comment (step 1 done)" in text
    writes = re.search(r'<table class="fork-writes" id="fork-writes">(.*?)</table>', text, re.S)
    assert writes and "tickets.comment" in writes.group(1) and "step 1" in writes.group(1)
    assert "tickets.create" not in writes.group(1)  # copied: replayed, never run again
    runs_on = re.search(r'<p id="fork-runs-on">([^<]*)</p>', text)
    assert runs_on and "Celery workers run agent support" in runs_on.group(1)
    assert 'name="write:tickets.comment" value="hold"' in text
    assert 'value="what if"' in text  # the note carried over

    # hold: the fork's comment waits on the desk instead of posting a second one
    admin.post(
        f"/console/runs/{original.pk}/fork",
        {"index": 1, "note": "what if", "write:tickets.comment": "hold"},
    )
    fork = Run.objects.get(forked_from=original)
    created = Event.objects.get(run=fork, type=EventType.RUN_CREATED)
    assert created.payload["writes_after_fork"] == {"tickets.comment": "hold"}
    assert AuditEntry.objects.get(action="run.fork").details["writes"] == {
        "tickets.comment": "hold"
    }
    held = gateway(
        fork.pk, lease_fork(fork), 1, "tickets.comment", {"ticket_id": ticket.pk, "body": "Again?"}
    )
    assert held.state == "awaiting_approval"
    assert TicketComment.objects.filter(ticket=ticket).count() == 1
    assert list(ForkFence.objects.filter(run=fork).values_list("tool", flat=True)) == [
        "tickets.comment"
    ]
    # the fence is the fork's alone: the approval rules page does not list it
    rules = admin.get("/approval-rules/").content.decode()
    assert "tickets.comment" not in rules and "a fork&#x27;s fence" not in rules

    # run again, chosen explicitly: the second fork posts its comment (the first fork's fence
    # holds that fork alone)
    admin.post(
        f"/console/runs/{original.pk}/fork",
        {"index": 1, "note": "post it again", "write:tickets.comment": "again"},
    )
    again = Run.objects.filter(forked_from=original).exclude(pk=fork.pk).get()
    posted = gateway(
        again.pk, lease_fork(again), 1, "tickets.comment", {"ticket_id": ticket.pk, "body": "2nd"}
    )
    assert posted.state == "done"
    assert TicketComment.objects.filter(ticket=ticket).count() == 2


def test_a_fork_after_the_last_write_needs_no_choice(client_for: Any) -> None:
    original, ticket = completed_with_a_comment()
    admin = client_for(ADMINS)
    admin.post(f"/console/runs/{original.pk}/fork", {"index": 2, "note": "replay all"})
    fork = Run.objects.get(forked_from=original)
    assert not ForkFence.objects.filter(run=fork).exists()
    assert TicketComment.objects.filter(ticket=ticket).count() == 1
