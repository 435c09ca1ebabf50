"""The transition tables in runs.constants are the only transitions the services can make."""

import itertools
from typing import Any

import pytest

from runs import kernel
from runs.constants import RUN_TRANSITIONS, STEP_TRANSITIONS, RunStatus, StepState
from runs.models import Run, Step
from runs.services.creation import run_create


@pytest.mark.parametrize(("source", "target"), list(itertools.product(RunStatus.values, repeat=2)))
def test_a_run_moves_only_along_the_table(source: str, target: str) -> None:
    run = Run(status=source)
    if target in RUN_TRANSITIONS[source]:
        kernel.run_move(run, target)
        assert run.status == target
    else:
        with pytest.raises(kernel.InvalidTransition):
            kernel.run_move(run, target)
        assert run.status == source


@pytest.mark.parametrize(("source", "target"), list(itertools.product(StepState.values, repeat=2)))
def test_a_step_moves_only_along_the_table(source: str, target: str) -> None:
    step = Step(state=source)
    if target in STEP_TRANSITIONS[source]:
        kernel.step_move(step, target)
        assert step.state == target
    else:
        with pytest.raises(kernel.InvalidTransition):
            kernel.step_move(step, target)


def test_every_state_has_a_row_in_its_table() -> None:
    assert set(RUN_TRANSITIONS) == set(RunStatus.values)
    assert set(STEP_TRANSITIONS) == set(StepState.values)
    for status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ABANDONED):
        assert RUN_TRANSITIONS[status] == frozenset()


def test_the_database_refuses_a_state_outside_the_enum(db: Any) -> None:
    from django.db import IntegrityError

    run, _ = run_create(agent="a", input={}, actor="t")
    with pytest.raises(IntegrityError):
        Run.objects.filter(pk=run.pk).update(status="teleported")


def test_the_database_holds_the_same_tables(db: Any) -> None:
    """ledger.sql's generated ledger_transition_allowed says yes exactly where runs.constants does."""
    from django.db import connection

    pairs = [
        ("run", RUN_TRANSITIONS, RunStatus.values),
        ("step", STEP_TRANSITIONS, StepState.values),
    ]
    with connection.cursor() as cursor:
        for kind, table, values in pairs:
            for source, target in itertools.product(values, repeat=2):
                cursor.execute(
                    "SELECT ledger_transition_allowed(%s, %s, %s)", [kind, source, target]
                )
                assert cursor.fetchone() == (target in table[source],), (kind, source, target)


def test_the_database_refuses_a_move_the_table_forbids(db: Any) -> None:
    """A raw UPDATE (as the kernel's own `status :=` / `s.state :=` assignments end in) cannot
    make a move the tables forbid: pending -> completed for a run, intent -> denied for a step."""
    from django.db import IntegrityError, transaction

    from runs.services.leases import run_lease_acquire

    run, _ = run_create(agent="a", input={}, actor="t")
    assert RunStatus.COMPLETED not in RUN_TRANSITIONS[RunStatus.PENDING]
    with (
        pytest.raises(IntegrityError, match="cannot move from pending to completed"),
        transaction.atomic(),
    ):
        Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    run.refresh_from_db()
    assert run.status == RunStatus.PENDING

    epoch = run_lease_acquire(run_id=run.pk, worker="w", ttl_seconds=60, actor="t").epoch
    kernel.step_intent(
        run_id=run.pk,
        epoch=epoch,
        index=0,
        kind="tool",
        name="send",
        effect="write",
        arguments={},
        actor="t",
    )
    assert StepState.DENIED not in STEP_TRANSITIONS[StepState.INTENT]
    with (
        pytest.raises(IntegrityError, match="cannot move from intent to denied"),
        transaction.atomic(),
    ):
        Step.objects.filter(run_id=run.pk, index=0).update(state=StepState.DENIED)
    # a move the table allows passes the same trigger
    Step.objects.filter(run_id=run.pk, index=0).update(state=StepState.INTERRUPTED)
    assert Step.objects.get(run_id=run.pk, index=0).state == StepState.INTERRUPTED
