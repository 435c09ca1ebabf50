"""A gateway step in one HTTP call: journal the intent, run the tool under its key, record it.

`POST /api/v1/runs/{id}/steps/` with `"invoke": true` names a registered tool. For a write tool:

1. the intent is journalled by the kernel's one statement and commits on its own (autocommit):
   from here on, a crash is recovered by the key record, exactly as for three calls;
2. the key is reserved (`idempotency_run`'s first transaction commits before the tool runs);
3. the tool runs in the second transaction, which ends with the key's completion and the
   step's outcome (`step_done` or `step_error` with its event): one commit for both.

So a write step costs three commits and no HTTP between them. A read tool runs first and is
journalled with its outcome in one statement afterwards (a lost read is only re-executed).
A replay (the step already done or error) answers the recorded step without running anything.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any
from uuid import UUID

from runs.api_errors import ApplicationError
from runs.constants import Effect, EnforcedBy, StepKind, StepState
from runs.kernel import BudgetStopped, StepAnswer
from runs.models import Step
from runs.selectors import KeyStep
from runs.services.steps import step_intent_record
from tools.crash import crash_point
from tools.idempotency import ToolError
from tools.registry import ToolContext, tool_get, write_invoke


@dataclass(frozen=True)
class GatewayStep:
    step: Step
    created: bool  # False: the step was recorded before this call (a replay)


def gateway_step_run(
    *,
    run_id: UUID | str,
    epoch: int,
    index: int,
    name: str,
    effect: str,
    enforced_by: str | None,
    arguments: dict[str, Any],
    actor: str,
) -> GatewayStep:
    """Journal, run and record one gateway tool step; refusals as the intent's and the tool's."""
    found = tool_get(name=name)
    if effect != found.effect or enforced_by not in (None, EnforcedBy.LEDGER):
        raise ApplicationError(
            "validation_error",
            f"{name} is a {found.effect} tool run by the ledger's gateway.",
            status_code=400,
            details={
                "effect": [f"{name} is registered as {found.effect}."],
                "enforced_by": ["Gateway steps are enforced by the ledger (or leave it out)."],
            },
        )
    validated = found.validate(arguments)  # 400 before anything is journalled
    # this step's journal entry; what differs between a read and a write is given to it
    record = partial(
        step_intent_record,
        run_id=run_id,
        epoch=epoch,
        index=index,
        kind=StepKind.TOOL,
        name=name,
        arguments=arguments,
        actor=actor,
    )
    if found.effect == Effect.READ:
        return _read_step(found.fn, validated, name, actor, record)
    crash_point("before_intent")
    intent = record(effect=Effect.WRITE, enforced_by=EnforcedBy.LEDGER)
    step = intent.step
    if step.state != StepState.INTENT:
        return GatewayStep(step=step, created=False)  # recorded before: replay it
    crash_point("after_intent")
    answers: list[StepAnswer | BudgetStopped | None] = []
    write_invoke(
        found,
        validated=validated,
        arguments=arguments,
        key=step.idempotency_key,
        step=KeyStep.journalled(step, run_epoch=epoch),
        actor=actor,
        epoch=epoch,
        recorded=answers.append,
    )
    answer = answers[-1] if answers else None
    if isinstance(answer, BudgetStopped):  # recorded, and committed: now the run stops
        raise answer
    if answer is None:  # refused (the run moved on meanwhile): the step as the journal has it
        return GatewayStep(step=Step.objects.get(run_id=run_id, index=index), created=True)
    return GatewayStep(step=answer.step, created=True)


def _read_step(
    fn: Any, validated: dict[str, Any], name: str, actor: str, record: Callable[..., StepAnswer]
) -> GatewayStep:
    """Run a read tool, then journal its intent and outcome in one call of `record`."""
    try:
        outcome = {"status": "ok", "result": fn(validated, ToolContext(name, None, actor))}
    except ToolError as exc:
        outcome = {"status": "error", "result": exc.body()}
    recorded = record(effect=Effect.READ, outcome={**outcome, "usage": None})  # may stop the run
    return GatewayStep(step=recorded.step, created=recorded.created)


__all__ = ["GatewayStep", "gateway_step_run"]
