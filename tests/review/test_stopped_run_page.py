"""Runs that stopped hours ago: their page shows no lease as current (the holder's lease ended
long ago, and nothing may write now). A run stopped by its budget has a wall-clock bar that
stands at the time it ran; one waiting for review says its wall clock runs on (its deadline is
its creation time plus the limit)."""

import re
from typing import Any

import pytest

from dashboard.roles import SUPERVISORS
from runs.api_errors import ApplicationError
from runs.constants import RunStatus
from runs.kernel import BudgetStopped
from runs.models import BudgetPolicy, Run
from runs.services.creation import run_create
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record
from tests.console.factories import stepping_clock

pytestmark = pytest.mark.django_db


def stopped_by_its_token_budget(*, hours_ago: float) -> Run:
    """pod-6 takes a lease of 30 s and spends 150 of its 100 tokens in its first model step,
    `hours_ago` hours ago: the run is budget_exceeded, its lease long run out."""
    BudgetPolicy.objects.create(
        name="thrifty",
        agent="thrifty",
        max_steps=20,
        max_tokens=100,
        max_wall_seconds=3600,
        max_recoveries=3,
    )
    with stepping_clock(hours_ago=hours_ago) as tick:
        run, _ = run_create(agent="thrifty", input={}, actor="worker:pod-6")
        epoch = run_lease_acquire(
            run_id=run.pk, worker="pod-6", ttl_seconds=30, actor="worker:pod-6"
        ).epoch
        tick(2.0)
        with pytest.raises(BudgetStopped):  # recorded, and the run stops
            step_intent_record(
                run_id=run.pk,
                epoch=epoch,
                index=0,
                kind="model",
                name="model.chat",
                effect="read",
                arguments={"prompt": "a pasted log"},
                outcome={"status": "ok", "result": {}, "usage": {"input_tokens": 150}},
                actor="worker:pod-6",
            )
    # the row's creation time is the database's clock: set it to the story's
    made = run.events.order_by("seq").values_list("at", flat=True).first()
    Run.objects.filter(pk=run.pk).update(created_at=made)
    run.refresh_from_db()
    assert run.status == RunStatus.BUDGET_EXCEEDED, run.status
    return run


def test_a_run_stopped_hours_ago_shows_no_current_lease_and_a_wall_clock_that_stands_still(
    client_for: Any,
) -> None:
    run = stopped_by_its_token_budget(hours_ago=2)

    page = client_for(SUPERVISORS).get(f"/runs/{run.pk}/").content.decode()

    wall = re.search(r'title="wall clock s \(when it stopped\): (\d+) of 3600"', page)
    assert wall, "the page has a wall-clock bar"
    assert int(wall.group(1)) < 60, "the time it ran, not the two hours since"
    lease = re.search(r"<dt>Lease</dt><dd>(.*?)</dd>", page, re.S)
    assert lease
    assert "until" not in lease.group(1), lease.group(1)
    assert "pod-6" in lease.group(1) and "ended" in lease.group(1), lease.group(1)


def replaced_inside_email_send(*, hours_ago: float) -> Run:
    """The demo's T-1005, `hours_ago` hours ago: pod-5 dies inside email.send (enforced_by
    nobody); its replacement, same name, asks for a lease and finds the step unknown: the run
    needs review."""
    with stepping_clock(hours_ago=hours_ago) as tick:
        run, _ = run_create(agent="support", input={}, actor="worker:pod-5")
        epoch = run_lease_acquire(
            run_id=run.pk, worker="pod-5", ttl_seconds=15, actor="worker:pod-5"
        ).epoch
        tick(1.0)
        step_intent_record(
            run_id=run.pk,
            epoch=epoch,
            index=0,
            kind="tool",
            name="email.send",
            effect="write",
            enforced_by="nobody",
            arguments={"to": "alan@example.com", "subject": "Your address", "body": "Done."},
            actor="worker:pod-5",
        )
        tick(1.0)
        with pytest.raises(ApplicationError, match="review"):  # the replacement is turned away
            run_lease_acquire(run_id=run.pk, worker="pod-5", ttl_seconds=15, actor="worker:pod-5")
    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_REVIEW, run.status
    return run


def test_a_run_waiting_for_review_for_hours_says_its_wall_clock_runs_on(
    client_for: Any,
) -> None:
    run = replaced_inside_email_send(hours_ago=2)

    page = client_for(SUPERVISORS).get(f"/runs/{run.pk}/").content.decode()

    lease = re.search(r"<dt>Lease</dt><dd>(.*?)</dd>", page, re.S)
    assert lease and "until" not in lease.group(1), lease
    assert 'title="wall clock s (runs on while it waits): ' in page
