"""What a run's events say its steps are: the replay that binds every step field to the chain.

Each step's fields are bound by hashes in its events: `step_intent` names the arguments hash
(and kind, name, effect, enforced_by, key), `step_done` / `step_error` the result hash and usage,
`reconciled` the result hash of the key's stored response, `step_resolved` the resolution (and,
for `sent`, the result itself); `step_interrupted`, `step_unknown` and `step_reopened` move the
state. A fork's `step_copied` binds a whole copied step at once (intent fields, state, result
hash, usage and the resolution it carried in the original); approvals: `approval_requested`
(awaiting_approval), `approval_given` (one person; the state stays), `step_approved` (back to
intent) and `step_denied` (denied, with the resolution `deny` or `expire`). Replaying a run's events per step index gives what each step row must hold; a step row
edited behind the application's back disagrees, and the field is named.

Django-free: `verify_journal`, the dashboard, the checkpoint job and the offline export verifier
(`audit.verify`) all use this one replay. Steps are compared in the API's step representation
(`runs.representations.step_json`), the shape an export carries.
"""

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from runs.canonical import arguments_hash
from runs.vocabulary import EventType

ZERO_USAGE = {"input_tokens": 0, "output_tokens": 0, "cost_usd": "0.000000"}
INTENT_FIELDS = ("kind", "name", "effect", "enforced_by", "idempotency_key")
STEP_EVENTS = frozenset(
    {
        EventType.STEP_INTENT,
        EventType.STEP_REOPENED,
        EventType.STEP_DONE,
        EventType.STEP_ERROR,
        EventType.STEP_INTERRUPTED,
        EventType.STEP_UNKNOWN,
        EventType.RECONCILED,
        EventType.STEP_RESOLVED,
        EventType.STEP_COPIED,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_GIVEN,
        EventType.STEP_APPROVED,
        EventType.STEP_DENIED,
    }
)
_RESOLVED_STATE = {"sent": "done", "retry": "interrupted", "abandon": "abandoned"}


@dataclass
class BoundStep:
    """One step as its events state it; `seq` is the last event that changed it."""

    seq: int
    arguments_hash: Any
    intent: dict[str, Any]
    state: str = "intent"
    result_hash: str | None = field(default_factory=lambda: arguments_hash(None))
    usage: Any = field(default_factory=lambda: dict(ZERO_USAGE))
    resolution: dict[str, Any] | None = None


class StepReplay:
    """Feed a run's events in seq order, then compare the run's steps with `mismatches`."""

    def __init__(self) -> None:
        self.steps: dict[int, BoundStep] = {}
        self.problems: list[tuple[int, str]] = []

    def feed(self, *, seq: int, type: str, payload: Any, at: Any) -> None:
        if type not in STEP_EVENTS or not isinstance(payload, dict):
            return
        index = payload.get("index")
        if not isinstance(index, int):
            self.problems.append((seq, f"a {type} event names no step index"))
            return
        if type in (EventType.STEP_INTENT, EventType.STEP_COPIED):
            bound = BoundStep(
                seq=seq,
                arguments_hash=payload.get("arguments_hash"),
                intent={k: payload[k] for k in INTENT_FIELDS if k in payload},
            )
            if type == EventType.STEP_COPIED:  # a fork's copy carries its outcome too
                bound.state = str(payload.get("state"))
                bound.result_hash = payload.get("result_hash")
                bound.usage = payload.get("usage")
                bound.resolution = payload.get("resolution")
            self.steps[index] = bound
            return
        step = self.steps.get(index)
        if step is None:
            self.problems.append((seq, f"step {index}: a {type} event before its step_intent"))
            return
        step.seq = seq
        if type == EventType.STEP_REOPENED:
            step.state = "intent"
        elif type in (EventType.STEP_DONE, EventType.STEP_ERROR):
            step.state = "done" if type == EventType.STEP_DONE else "error"
            step.result_hash = payload.get("result_hash")
            step.usage = payload.get("usage")
        elif type == EventType.STEP_INTERRUPTED:
            step.state = "interrupted"
        elif type == EventType.STEP_UNKNOWN:
            step.state = "unknown"
        elif type == EventType.APPROVAL_REQUESTED:
            step.state = "awaiting_approval"
        elif type == EventType.APPROVAL_GIVEN:
            pass  # one person's approval; the step waits until enough people gave theirs
        elif type == EventType.STEP_APPROVED:
            step.state = "intent"
        elif type == EventType.STEP_DENIED:
            step.state = "denied"
            step.resolution = {
                "action": "expire" if payload.get("expired") else "deny",
                "by": payload.get("by"),
                "note": payload.get("note"),
                "at": at,
            }
        elif type == EventType.RECONCILED:
            step.state = "done" if payload.get("key_state") == "completed" else "error"
            # events written before reconciled carried result_hash leave the result unbound
            step.result_hash = payload.get("result_hash")
        else:  # step_resolved
            action = payload.get("action")
            step.state = _RESOLVED_STATE.get(str(action), f"(unknown action {action!r})")
            if action == "sent":
                step.result_hash = _hash(payload.get("result"))
            step.resolution = {
                "action": action,
                "by": payload.get("by"),
                "note": payload.get("note"),
                "at": at,
            }

    def mismatches(self, steps: Iterable[Any]) -> Iterator[tuple[int, str]]:
        """(event seq, problem) for every step field the events do not vouch for.

        `steps`: the run's steps in the API's representation (dicts). Problems the replay met
        (an event before its intent) come first.
        """
        yield from self.problems
        seen: set[Any] = set()
        for step in steps:
            if not isinstance(step, Mapping):
                yield 0, "a step that is not an object"
                continue
            index = step.get("index")
            seen.add(index)
            bound = self.steps.get(index) if isinstance(index, int) else None
            if bound is None:
                yield 0, f"step {index} has no step_intent event"
                continue
            for name in _disagreeing_fields(bound, step):
                yield bound.seq, f"step {index} {name} does not match its events"
        for index in sorted(set(self.steps) - seen):
            yield self.steps[index].seq, f"step {index} is journalled in the events but missing"


def _hash(value: Any) -> str | None:
    try:
        return arguments_hash(value)
    except (ValueError, TypeError):  # NaN or a non-JSON value: it cannot match any bound hash
        return None


def _disagreeing_fields(bound: BoundStep, step: Mapping[str, Any]) -> Iterator[str]:
    if step.get("state") != bound.state:
        yield "state"
    if step.get("arguments_hash") != bound.arguments_hash:
        yield "arguments_hash"
    if _hash(step.get("arguments")) != bound.arguments_hash:
        yield "arguments"
    if bound.result_hash is not None and _hash(step.get("result")) != bound.result_hash:
        yield "result"
    if step.get("usage") != bound.usage:
        yield "usage"
    if step.get("resolution") != bound.resolution:
        yield "resolution"
    for name, value in bound.intent.items():
        if step.get(name) != value:
            yield name
