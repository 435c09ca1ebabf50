"""The lean worker calls, given a payload runs.contract validated: one implementation.

Both doors (the DRF views in runs.apis and the lean path in runs.hotpath) and an in-process
transport call these: the calls on a run after checking that the token may see the run
(run_check_visible); `create` checks the token's agents itself (agent_check_allowed). Each
calls the journal kernel through runs.services and answers `(HTTP status, body)` with the
representations of docs/api.md; every refusal is raised as an ApplicationError, a budget stop
included (its details carry the step as recorded, and for an outcome the budget).
"""

from typing import Any
from uuid import UUID

from rest_framework import status

from runs.access import agent_check_allowed
from runs.constants import StepState
from runs.kernel import BudgetStopped
from runs.representations import heartbeat_json, lease_json, outcome_json, run_json, step_json
from runs.services.creation import run_create
from runs.services.finish import run_complete, run_fail
from runs.services.leases import run_heartbeat, run_lease_acquire
from runs.services.steps import step_intent_record, step_outcome_record
from tools.gateway import gateway_step_run

Reply = tuple[int, dict[str, Any]]


def create(*, payload: dict[str, Any], principal: Any) -> Reply:
    """POST /api/v1/runs/: 201 a new run, 200 the run the same (agent, external_id) attaches
    to; 403 `agent_not_allowed` for a token limited to other agents. A null input is `{}`."""
    agent_check_allowed(principal=principal, agent=payload["agent"])
    data = dict(payload)
    if data["input"] is None:
        data["input"] = {}
    run, created = run_create(**data, actor=str(principal))
    return status.HTTP_201_CREATED if created else status.HTTP_200_OK, run_json(run)


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


def complete(*, run_id: UUID | str, payload: dict[str, Any], actor: str) -> Reply:
    """POST .../complete (refusals: docs/api.md, needs_review for a write still open)."""
    return status.HTTP_200_OK, run_json(run_complete(run_id=run_id, **payload, actor=actor))


def fail(*, run_id: UUID | str, payload: dict[str, Any], actor: str) -> Reply:
    """POST .../fail: answered exactly as complete."""
    return status.HTTP_200_OK, run_json(run_fail(run_id=run_id, **payload, actor=actor))


__all__ = [
    "Reply",
    "complete",
    "create",
    "fail",
    "heartbeat",
    "intent",
    "intent_status",
    "lease",
    "outcome",
]
