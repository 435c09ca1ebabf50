"""T-1005 of the demo: a pod killed inside email.send (enforced by nobody), replaced at once under
the same worker name. The replacement's lease finds the send unknown and the run goes to review
(no recovery lease is ever granted); a supervisor marks it sent; the pod, restarted, replays the
journal and finishes. The transcript must show the crash, and count the replayed steps."""

import re
from typing import Any

import pytest

from console.timeline import timeline_build
from dashboard.roles import SUPERVISORS
from review.services.resolutions import review_step_resolve
from runs import clock
from runs.constants import RunStatus
from runs.models import Event, Run, Step
from runs.services.creation import run_create
from runs.services.finish import run_complete
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record
from tests.console.factories import stepping_clock, write_step
from tests.review.conftest import user_in

POD = "pod-T-1005"


def killed_inside_a_send_then_resumed() -> Run:
    with stepping_clock(hours_ago=1) as tick:
        run, _ = run_create(agent="support", input={"ticket": "T-1005"}, actor=f"worker:{POD}")
        epoch = run_lease_acquire(run_id=run.pk, worker=POD, ttl_seconds=30, actor="w").epoch
        for index in range(4):
            tick(0.5)
            write_step(run.pk, epoch, index, actor=f"worker:{POD}", tick=tick)
        tick(0.5)
        step_intent_record(
            run_id=run.pk,
            epoch=epoch,
            index=4,
            kind="tool",
            name="email.send",
            effect="write",
            enforced_by="nobody",
            arguments={"to": "alan@example.com", "subject": "Your address", "body": "Done."},
            actor=f"worker:{POD}",
        )
        tick(2.0)  # killed inside the send; the deployment starts the pod again at once
        with pytest.raises(Exception, match="review"):
            run_lease_acquire(run_id=run.pk, worker=POD, ttl_seconds=30, actor=f"worker:{POD}")
        tick(30.0)
        sam = user_in(SUPERVISORS, "sam")
        review_step_resolve(user=sam, run_id=run.pk, index=4, action="sent", note="in the outbox")
        tick(1.0)  # the pod, restarted, replays steps 0..4 and finishes
        grant = run_lease_acquire(run_id=run.pk, worker=POD, ttl_seconds=30, actor=f"worker:{POD}")
        tick(0.2)
        run_complete(run_id=run.pk, epoch=grant.epoch, output={"ok": True}, actor=f"worker:{POD}")
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    return run


@pytest.mark.django_db
def test_a_pod_killed_inside_a_send_shows_its_crash_and_the_steps_its_restart_replayed(
    groups: None, client_for: Any
) -> None:
    run = killed_inside_a_send_then_resumed()
    steps = list(Step.objects.filter(run=run).order_by("index"))
    events = list(Event.objects.filter(run=run).order_by("seq"))
    tl = timeline_build(run=run, steps=steps, events=events, now=clock.now())
    [crash] = tl.crashes
    intent_at = next(e.at for e in events if e.type == "step_intent" and e.payload["index"] == 4)
    assert crash.at == intent_at  # the worker's last journalled write, not the review after it
    assert "email.send" in crash.label
    assert [b.index for b in tl.bars if b.replayed] == [0, 1, 2, 3, 4]

    page = client_for(SUPERVISORS).get(f"/runs/{run.pk}/").content.decode()
    assert re.search(r"Duplicates prevented: 5\b", page)
    assert "5 steps replayed from the journal" in page
    assert "✕" in page  # the crash marker drawn on the timeline
