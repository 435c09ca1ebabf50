"""Runs for the console's tests, built through the journal's real services (no hand-made rows)."""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from runs import clock
from runs.constants import RunStatus
from runs.models import Run
from runs.services.creation import run_create
from runs.services.enforcement import run_lease_expire
from runs.services.finish import run_complete
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record, step_outcome_record

WORKER = "worker:w-1"


def journalled_run(steps: int, *, agent: str = "support", worker: str = "w-1") -> tuple[Run, int]:
    """A run leased by `worker` with `steps` steps: reads and `ledger` writes alternating, done."""
    run, _ = run_create(agent=agent, input={"ticket": "T-1"}, actor=f"worker:{worker}")
    epoch = run_lease_acquire(
        run_id=run.pk, worker=worker, ttl_seconds=30, actor=f"worker:{worker}"
    ).epoch
    for index in range(steps):
        write_step(run.pk, epoch, index, actor=f"worker:{worker}")
    run.refresh_from_db()
    return run, epoch


def write_step(
    run_id: Any, epoch: int, index: int, *, actor: str = WORKER, tick: Any = None
) -> None:
    """Even indexes: a model step (one call); odd: a `ledger` write (intent, outcome)."""
    if index % 2 == 0:
        step_intent_record(
            run_id=run_id,
            epoch=epoch,
            index=index,
            kind="model",
            name="model.think",
            effect="read",
            arguments={
                "messages": [
                    {"role": "system", "content": "You resolve support tickets."},
                    {"role": "user", "content": f"What next after step {index}?"},
                ]
            },
            outcome={
                "status": "ok",
                "result": {"content": f"thought {index}"},
                "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": "0.001"},
            },
            actor=actor,
        )
        return
    step_intent_record(
        run_id=run_id,
        epoch=epoch,
        index=index,
        kind="tool",
        name="tickets.comment",
        effect="write",
        enforced_by="ledger",
        arguments={"ticket_id": 7, "body": f"comment {index}"},
        actor=actor,
    )
    if tick is not None:
        tick(0.3)
    step_outcome_record(
        run_id=run_id,
        index=index,
        epoch=epoch,
        status="ok",
        result={"comment": {"id": index, "ticket_id": 7}},
        usage={"input_tokens": 0, "output_tokens": 0},
        actor=actor,
    )


@contextmanager
def stepping_clock(*, hours_ago: float = 0.0) -> Iterator[Any]:
    """The journal's clock under the test's hand: `tick(seconds)` moves it on (from `hours_ago`
    hours before the real clock)."""
    now = [clock.now() - timedelta(hours=hours_ago)]

    def tick(seconds: float) -> None:
        now[0] = now[0] + timedelta(seconds=seconds)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(clock, "now", lambda: now[0])
        yield tick


def evicted_at_step_12(*, steps: int = 20, crash_after: int = 12) -> Run:
    """The story: pod-1 journals steps 0..12 and is evicted; its restart (same name) recovers,
    replays 13 steps from the journal and runs 13..19 to completion."""
    with stepping_clock() as tick:
        run, _ = run_create(agent="support", input={"ticket": "T-1004"}, actor="worker:pod-1")
        epoch = run_lease_acquire(
            run_id=run.pk, worker="pod-1", ttl_seconds=30, actor="worker:pod-1"
        ).epoch
        for index in range(crash_after + 1):
            tick(0.6)
            write_step(run.pk, epoch, index, actor="worker:pod-1", tick=tick)
        tick(4.0)  # evicted: a new pod starts
        grant = run_lease_acquire(
            run_id=run.pk, worker="pod-1", ttl_seconds=30, actor="worker:pod-1"
        )
        assert grant.recovered
        for index in range(crash_after + 1, steps):
            tick(0.6)
            write_step(run.pk, grant.epoch, index, actor="worker:pod-1", tick=tick)
        tick(0.1)
        return run_complete(
            run_id=run.pk, epoch=grant.epoch, output={"ok": True}, actor="worker:pod-1"
        )


def recovered_then_maybe_sent(*, hours_ago: float = 3.0) -> Run:
    """A stopped run, `hours_ago` hours ago: pod-5 journals steps 0..10 and is evicted; its
    restart recovers 50 ms later (the crash and the recovery marks almost on top of each other),
    journals step 11, then dies inside email.send (enforced_by nobody, step 12); its lease runs
    out and the run waits for a person since."""
    with stepping_clock(hours_ago=hours_ago) as tick:
        run, _ = run_create(agent="support", input={"ticket": "T-1005"}, actor="worker:pod-5")
        epoch = run_lease_acquire(
            run_id=run.pk, worker="pod-5", ttl_seconds=15, actor="worker:pod-5"
        ).epoch
        for index in range(11):
            tick(0.6)
            write_step(run.pk, epoch, index, actor="worker:pod-5", tick=tick)
        tick(0.05)
        grant = run_lease_acquire(
            run_id=run.pk, worker="pod-5", ttl_seconds=15, actor="worker:pod-5"
        )
        assert grant.recovered
        tick(0.6)
        write_step(run.pk, grant.epoch, 11, actor="worker:pod-5")
        tick(0.4)
        step_intent_record(
            run_id=run.pk,
            epoch=grant.epoch,
            index=12,
            kind="tool",
            name="email.send",
            effect="write",
            enforced_by="nobody",
            arguments={"to": "alan@example.com", "subject": "Your address", "body": "Done."},
            actor="worker:pod-5",
        )
        tick(16)
        run_lease_expire(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_REVIEW, run.status
    return run
