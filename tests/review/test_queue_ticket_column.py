"""A queue row names the ticket the run works on once: `T-1005` in the ticket column, the help
desk's own number (which the agent's tickets.create made) labelled as such beside it, and no
external id that only repeats the ticket."""

import re
from typing import Any

import pytest

from dashboard.roles import SUPERVISORS
from runs.services.creation import run_create
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record
from tests.review.factories import _lost_lease

pytestmark = pytest.mark.django_db


def test_the_ticket_column_names_the_runs_ticket_and_labels_the_help_desks_number(
    client_for: Any,
) -> None:
    run, _ = run_create(
        agent="support",
        input={"ticket": {"id": "T-1005", "customer": "alan@example.com", "subject": "Address"}},
        external_id="ticket:T-1005",
        actor="worker:pod-5",
    )
    epoch = run_lease_acquire(run_id=run.pk, worker="pod-5", ttl_seconds=5, actor="w").epoch
    step_intent_record(
        run_id=run.pk,
        epoch=epoch,
        index=0,
        kind="tool",
        name="email.send",
        effect="write",
        enforced_by="nobody",
        arguments={"to": "alan@example.com", "subject": "Done", "body": "Done.", "ticket_id": 41},
        actor="worker:pod-5",
    )
    _lost_lease(run.pk, 5)

    page = client_for(SUPERVISORS).get("/queue/").content.decode()
    row = re.search(rf'<tr[^>]*data-step="{run.pk}#0">(.*?)</tr>', page, re.S)
    assert row is not None
    cells = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row.group(1)))
    ticket = re.search(r'<td class="ticket">(.*?)</td>', row.group(1), re.S)
    assert ticket is not None
    assert re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", ticket.group(1))).strip() == (
        "T-1005 help desk #41"
    )
    assert cells.count("T-1005") == 1  # not again as the run's external id
