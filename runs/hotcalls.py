"""The four hot worker calls, given a payload runs.contract validated: one implementation.

Both doors (the DRF views in runs.apis and the lean path in runs.hotpath) and an in-process
transport call these after checking that the token may see the run (run_check_visible). Each
calls the journal kernel through runs.services and answers `(HTTP status, body)` with the
representations of docs/api.md; every refusal is raised as an ApplicationError, a budget stop
included (its details carry the step as recorded, and for an outcome the budget).
"""

from typing import Any
from uuid import UUID

from rest_framework import status

from runs.constants import StepState
from runs.kernel import BudgetStopped
from runs.representations import heartbeat_json, lease_json, outcome_json, step_json
from runs.services.leases import run_heartbeat, run_lease_acquire
from runs.services.steps import step_intent_record, step_outcome_record
from tools.gateway import gateway_step_run

Reply = tuple[int, dict[str, Any]]


def intent_status(state: str, *, created: bool) -> int:
    """202 while the step waits for approval (new or replayed); else 201 new, 200 as recorded."""
    if state == StepState.AWAITING_APPROVAL:
        return status.HTTP_202_ACCEPTED
    return status.HTTP_201_CREATED if created else status.HTTP_200_OK


def intent(*, run_id: UUID | str, payload: dict[str, Any], actor: str) -> Reply:
    """POST .../steps/: journal an intent (a read with its outcome), or run a gateway step;
    with `previous_outcome`, the previous step's outcome first, in the same transaction."""
    data = dict(payload)
    try:
        if data.pop("invoke", False):
            data.pop("outcome", None)
            data.pop("previous_outcome", None)
            del data["kind"]
            result: Any = gateway_step_run(run_id=run_id, **data, actor=actor)
        else:
            result = step_intent_record(run_id=run_id, **data, actor=actor)
    except BudgetStopped as stop:
        if stop.answer.step.index != payload["index"]:
            # the carried previous_outcome stopped the run: answered as its outcome call would be
            raise stop.answered(outcome_json(stop.answer)) from None
        raise stop.answered({"step": step_json(stop.answer.step)}) from None
    return intent_status(result.step.state, created=result.created), step_json(result.step)


def outcome(*, run_id: UUID | str, index: int, payload: dict[str, Any], actor: str) -> Reply:
    """POST .../steps/{index}/outcome."""
    try:
        answer = step_outcome_record(run_id=run_id, index=index, **payload, actor=actor)
    except BudgetStopped as stop:
        raise stop.answered(outcome_json(stop.answer)) from None
    return status.HTTP_200_OK, outcome_json(answer)


def heartbeat(*, run_id: UUID | str, payload: dict[str, Any]) -> Reply:
    """POST .../heartbeat."""
    beat = run_heartbeat(run_id=run_id, epoch=payload["epoch"])
    return status.HTTP_200_OK, heartbeat_json(beat)


def lease(*, run_id: UUID | str, payload: dict[str, Any], actor: str) -> Reply:
    """POST .../lease."""
    grant = run_lease_acquire(run_id=run_id, **payload, actor=actor)
    return status.HTTP_200_OK, lease_json(grant)


__all__ = ["Reply", "heartbeat", "intent", "intent_status", "lease", "outcome"]
