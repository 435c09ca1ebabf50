"""The lean worker calls: one implementation, and one order of checks, for every door.

Both HTTP doors (the DRF views in runs.apis and the lean path in runs.hotpath) and the
in-process transport (runs.inprocess) answer a hot call with `answer`: whether the token may see
the run (`create` checks the token's agents itself), then the request validated the door's way
against its runs.contract shape, then the call. Each calls the journal kernel through
runs.services and answers `(HTTP status, body)` with the representations of docs/api.md; every
refusal is raised as an ApplicationError, a budget stop included (its details carry the step as
recorded, and for an outcome the budget).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from rest_framework import status

from runs import contract
from runs.access import agent_check_allowed, run_check_visible
from runs.constants import StepState
from runs.kernel import BudgetStopped
from runs.representations import heartbeat_json, lease_json, outcome_json, run_json, step_json
from runs.services.creation import run_create
from runs.services.finish import run_complete, run_fail
from runs.services.leases import run_heartbeat, run_lease_acquire
from runs.services.steps import step_intent_record, step_outcome_record
from tools.gateway import gateway_step_run
from traces.context import traceparent_parsed

Reply = tuple[int, dict[str, Any]]
RunId = UUID | str
# each call takes the same keywords (principal, run_id, index, payload): create is the one call
# not on a run (run_id None), outcome the one on a step (index)


def create(*, principal: Any, run_id: None, index: None, payload: dict[str, Any]) -> Reply:
    """POST /api/v1/runs/: 201 a new run, 200 the run the same (agent, external_id) attaches
    to; 403 `agent_not_allowed` for a token limited to other agents. A null input is `{}`.
    `trace_parent`: the caller's span (its `traceparent` header, put here by `answer`)."""
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


def intent(*, principal: Any, run_id: RunId, index: None, payload: dict[str, Any]) -> Reply:
    """POST .../steps/: journal an intent (a read with its outcome), or run a gateway step;
    with `previous_outcome`, the previous step's outcome first, in the same transaction."""
    data = dict(payload)
    try:
        if data.pop("invoke", False):
            data.pop("outcome", None)
            data.pop("previous_outcome", None)
            del data["kind"]
            result: Any = gateway_step_run(run_id=run_id, **data, actor=str(principal))
        else:
            result = step_intent_record(run_id=run_id, **data, actor=str(principal))
    except BudgetStopped as stop:
        if stop.answer.step.index != payload["index"]:
            # the carried previous_outcome stopped the run: answered as its outcome call would be
            raise stop.answered(outcome_json(stop.answer)) from None
        raise stop.answered({"step": step_json(stop.answer.step)}) from None
    return intent_status(result.step.state, created=result.created), step_json(result.step)


def outcome(*, principal: Any, run_id: RunId, index: int, payload: dict[str, Any]) -> Reply:
    """POST .../steps/{index}/outcome."""
    try:
        answer = step_outcome_record(run_id=run_id, index=index, **payload, actor=str(principal))
    except BudgetStopped as stop:
        raise stop.answered(outcome_json(stop.answer)) from None
    return status.HTTP_200_OK, outcome_json(answer)


def heartbeat(*, principal: Any, run_id: RunId, index: None, payload: dict[str, Any]) -> Reply:
    """POST .../heartbeat."""
    beat = run_heartbeat(run_id=run_id, epoch=payload["epoch"])
    return status.HTTP_200_OK, heartbeat_json(beat)


def lease(*, principal: Any, run_id: RunId, index: None, payload: dict[str, Any]) -> Reply:
    """POST .../lease."""
    grant = run_lease_acquire(run_id=run_id, **payload, actor=str(principal))
    return status.HTTP_200_OK, lease_json(grant)


def complete(*, principal: Any, run_id: RunId, index: None, payload: dict[str, Any]) -> Reply:
    """POST .../complete (refusals: docs/api.md, needs_review for a write still open)."""
    run = run_complete(run_id=run_id, **payload, actor=str(principal))
    return status.HTTP_200_OK, run_json(run)


def fail(*, principal: Any, run_id: RunId, index: None, payload: dict[str, Any]) -> Reply:
    """POST .../fail: answered exactly as complete."""
    return status.HTTP_200_OK, run_json(run_fail(run_id=run_id, **payload, actor=str(principal)))


@dataclass(frozen=True)
class HotCall:
    """A hot call: the shape of its request (runs.contract) and what answers it."""

    shape: contract.Shape
    call: Callable[..., Reply]


CALLS = {
    "create": HotCall(contract.CREATE, create),
    "lease": HotCall(contract.LEASE, lease),
    "heartbeat": HotCall(contract.HEARTBEAT, heartbeat),
    "intent": HotCall(contract.INTENT, intent),
    "outcome": HotCall(contract.OUTCOME, outcome),
    "complete": HotCall(contract.COMPLETE, complete),
    "fail": HotCall(contract.FAIL, fail),
}

# how a door validates a request against its shape: the lean checks (which may Decline), the
# DRF serializer (a 400 with field errors), or the one after the other
Validate = Callable[[contract.Shape, Any], dict[str, Any]]


def answer(
    name: str,
    *,
    principal: Any,
    run_id: RunId | None = None,
    index: int | None = None,
    data: Any,
    validate: Validate,
    traceparent: str | None = None,
) -> Reply:
    """The hot call `name` for `principal`: the run's visibility first (a 404 comes before a
    400), then `data` validated by the door's `validate`, then the call.

    `traceparent`: the request's W3C `traceparent` header, which every door passes as it is;
    a create's run joins that trace (an invalid header is ignored, as W3C says)."""
    hot = CALLS[name]
    if (run_id is None) != (name == "create"):
        raise ValueError(f"{name} is {'not ' if run_id is None else ''}a call on a run")
    if run_id is not None:
        run_check_visible(principal=principal, run_id=run_id)
    payload = validate(hot.shape, data)
    if name == "create":
        payload = {**payload, "trace_parent": traceparent_parsed(traceparent)}
    return hot.call(principal=principal, run_id=run_id, index=index, payload=payload)


__all__ = [
    "CALLS",
    "HotCall",
    "Reply",
    "Validate",
    "answer",
    "complete",
    "create",
    "fail",
    "heartbeat",
    "intent",
    "intent_status",
    "lease",
    "outcome",
]
