"""What the journal makes of a step's values, and the small answers a run gives back: pure
helpers of `intentledger._run`, kept apart so the run's own module stays about the run."""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable
from typing import Any

from intentledger._transport import StepIntent
from intentledger.errors import ApprovalDenied, LedgerError

# how long to wait for a gateway key another execution still holds (409 idempotency_in_progress)
IN_PROGRESS_WAIT_SECONDS = 30.0


def _normalized(value: Any, what: str) -> Any:
    """The value as the journal will hand it back (JSON round trip), so replay sees the same."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable: {exc}") from exc


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _matches(recorded: dict[str, Any], intent: StepIntent) -> bool:
    """The journal's step is this one: the same kind, name, effect and arguments."""
    same_call = (recorded["kind"], recorded["name"], recorded["effect"]) == (
        intent.kind,
        intent.name,
        intent.effect,
    )
    return same_call and _canonical(recorded["arguments"]) == _canonical(intent.arguments)


def _usage_of(result: Any) -> dict[str, Any]:
    usage = result.get("usage") if isinstance(result, dict) else None
    if not isinstance(usage, dict):
        return {"input_tokens": 0, "output_tokens": 0}
    out: dict[str, Any] = {
        "input_tokens": int(usage.get("input_tokens", usage.get("prompt_tokens", 0)) or 0),
        "output_tokens": int(usage.get("output_tokens", usage.get("completion_tokens", 0)) or 0),
    }
    if usage.get("cost_usd") is not None:
        out["cost_usd"] = str(usage["cost_usd"])
    return out


def _spends(usage: dict[str, Any]) -> bool:
    return bool(usage.get("input_tokens") or usage.get("output_tokens") or usage.get("cost_usd"))


def _accepts_key(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "idempotency_key" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def _still_executing(error: LedgerError, waited_since: float) -> bool:
    """Whether a 409 `idempotency_in_progress` is worth waiting out: not once the server calls
    the key's lock stale (`details.stale`: its execution was lost, and only a supervisor's retry
    frees the key), and not past IN_PROGRESS_WAIT_SECONDS."""
    if error.details.get("stale") is True:
        return False
    return time.monotonic() - waited_since < IN_PROGRESS_WAIT_SECONDS


def _denied(step: dict[str, Any]) -> ApprovalDenied:
    resolution = step.get("resolution") or {}
    details = {"index": step.get("index"), **resolution}
    if resolution.get("action") == "expire":
        message = f"Step {step.get('index')} ({step.get('name')}) was not approved in time."
    else:
        message = (
            f"Step {step.get('index')} ({step.get('name')}) was denied by "
            f"{resolution.get('by')}: {resolution.get('note')}"
        )
    return ApprovalDenied(message, code="approval_denied", status=409, details=details)


class _ToolRefused(Exception):
    def __init__(self, error: LedgerError) -> None:
        super().__init__(str(error))
        self.error = error
