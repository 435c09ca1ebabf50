"""The JSON shapes of DESIGN.md ("Representations"), built by hand: the hot path skips DRF fields."""

from typing import Any

from runs.models import Event, Run, Step
from runs.services import budget_of, money


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def run_json(run: Run) -> dict[str, Any]:
    return {
        "id": str(run.pk),
        "agent": run.agent,
        "external_id": run.external_id,
        "status": run.status,
        "status_reason": run.status_reason,
        "input": run.input,
        "output": run.output,
        "error": run.error,
        "epoch": run.epoch,
        "lease": (
            {"worker": run.lease_worker, "expires_at": _iso(run.lease_expires_at)}
            if run.lease_worker
            else None
        ),
        "budget": budget_of(run),
        "step_count": run.step_count,
        "created_at": _iso(run.created_at),
        "updated_at": _iso(run.updated_at),
    }


def step_json(step: Step) -> dict[str, Any]:
    return {
        "index": step.index,
        "kind": step.kind,
        "name": step.name,
        "effect": step.effect,
        "enforced_by": step.enforced_by,
        "arguments": step.arguments,
        "arguments_hash": step.arguments_hash,
        "idempotency_key": step.idempotency_key,
        "state": step.state,
        "result": step.result,
        "usage": {
            "input_tokens": step.usage_input_tokens,
            "output_tokens": step.usage_output_tokens,
            "cost_usd": money(step.usage_cost_usd),
        },
        "epoch": step.epoch,
        "intent_at": _iso(step.intent_at),
        "outcome_at": _iso(step.outcome_at),
        "resolution": (
            {
                "action": step.resolution_action,
                "by": step.resolution_by,
                "note": step.resolution_note,
                "at": _iso(step.resolution_at),
            }
            if step.resolution_action
            else None
        ),
    }


def event_json(event: Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "type": event.type,
        "payload": event.payload,
        "actor": event.actor,
        "at": _iso(event.at),
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }
