"""The JSON shapes of docs/api.md ("Representations"), built by hand: the hot path skips DRF fields."""

from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol

from runs.kernel import HeartbeatAnswer
from runs.models import Run
from runs.services import LeaseGrant, budget_of, money


class StepFields(Protocol):
    """A Step, or a plain row with its columns (exports read rows: instances cost 3x the time)."""

    @property
    def index(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def effect(self) -> str: ...
    @property
    def enforced_by(self) -> str | None: ...
    @property
    def arguments(self) -> Any: ...
    @property
    def arguments_hash(self) -> str: ...
    @property
    def idempotency_key(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def result(self) -> Any: ...
    @property
    def usage_input_tokens(self) -> int: ...
    @property
    def usage_output_tokens(self) -> int: ...
    @property
    def usage_cost_usd(self) -> Decimal: ...
    @property
    def epoch(self) -> int: ...
    @property
    def intent_at(self) -> datetime: ...
    @property
    def outcome_at(self) -> datetime | None: ...
    @property
    def resolution_action(self) -> str | None: ...
    @property
    def resolution_by(self) -> str | None: ...
    @property
    def resolution_note(self) -> str | None: ...
    @property
    def resolution_at(self) -> datetime | None: ...


class EventFields(Protocol):
    """An Event, or a plain row with its columns."""

    @property
    def seq(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def payload(self) -> Any: ...
    @property
    def actor(self) -> str: ...
    @property
    def at(self) -> datetime: ...
    @property
    def prev_hash(self) -> str: ...
    @property
    def hash(self) -> str: ...


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def run_json(run: Run) -> dict[str, Any]:
    return {
        "id": str(run.pk),
        "agent": run.agent,
        "external_id": run.external_id,
        "status": run.status,
        "status_reason": run.status_reason,
        "runner": run.runner,
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
        "forked_from": (
            {"run_id": str(run.forked_from_id), "index": run.forked_from_index}
            if run.forked_from_id
            else None
        ),
        "created_at": _iso(run.created_at),
        "updated_at": _iso(run.updated_at),
    }


def step_json(step: StepFields) -> dict[str, Any]:
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


def lease_json(grant: LeaseGrant) -> dict[str, Any]:
    """The lease call's answer: the run, the new epoch and the journal to replay."""
    return {
        "run": run_json(grant.run),
        "epoch": grant.epoch,
        "expires_at": grant.expires_at.isoformat(),
        "recovered": grant.recovered,
        "journal": [step_json(s) for s in grant.journal],
    }


def heartbeat_json(beat: HeartbeatAnswer) -> dict[str, Any]:
    return {"expires_at": _iso(beat.expires_at), "status": beat.status, "epoch": beat.epoch}


def event_json(event: EventFields) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "type": event.type,
        "payload": event.payload,
        "actor": event.actor,
        "at": _iso(event.at),
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }
