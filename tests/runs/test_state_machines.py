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
