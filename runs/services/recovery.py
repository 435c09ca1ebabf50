"""The recovery rules (docs/api.md) for a run's intents without an outcome.

Locks: the caller holds the run's row lock (a new lease after a lost holder, the reaper); the
steps are read under it. A write's tool lookup (tools.lookups, at most 2 s) is asked while that
lock is held.
"""

from datetime import datetime
from typing import Any

from runs.canonical import arguments_hash
from runs.constants import Effect, EnforcedBy, EventType, StepState
from runs.kernel import event_append, step_move
from runs.models import Run, Step
from runs.recovery import key_state_lookup
from tools.lookups import tool_lookup


def _recover_open_intents(run: Run, *, actor: str, now: datetime) -> list[Step]:
    """The recovery rules (docs/api.md) for every intent without an outcome. Returns the unknown steps.

    A write the ledger does not enforce is first put to its tool's lookup, if it declares one
    (tools.lookups, at most 2 s, asked while the caller holds the run's lock).
    """
    unknown: list[Step] = []
    lookup = None
    for step in Step.objects.filter(run=run, state=StepState.INTENT).order_by("index"):
        payload: dict[str, Any] = {
            "index": step.index,
            "name": step.name,
            "idempotency_key": step.idempotency_key,
        }
        if step.executions == 0:
            # approved while no worker waited for it: never handed out, so it never ran
            step_move(step, StepState.INTERRUPTED)
            event_type = EventType.STEP_INTERRUPTED
            payload["why"] = "approved; no worker had taken it yet"
        elif (
            step.effect == Effect.WRITE
            and step.enforced_by in (EnforcedBy.TOOL, EnforcedBy.NOBODY)
            and (answer := tool_lookup(step.name, step.idempotency_key)) is not None
        ):
            # the tool can say whether the key took effect (tools.lookups): its answer settles
            # the step and stays in the chain as evidence; "no answer" changes nothing
            payload["lookup"] = answer.evidence()
            if answer.state == "completed":
                step_move(step, StepState.DONE)
                step.result = {"settled_by_lookup": "completed"}
                step.outcome_at = now
                payload["key_state"] = "completed"
                event_type = EventType.RECONCILED
            elif answer.state == "absent" or step.enforced_by == EnforcedBy.TOOL:
                # absent: it never ran; the tool's own key makes a re-execution safe anyway
                step_move(step, StepState.INTERRUPTED)
                event_type = EventType.STEP_INTERRUPTED
            else:
                step_move(step, StepState.UNKNOWN)
                event_type = EventType.STEP_UNKNOWN
                payload["why"] = (
                    "the tool cannot tell whether it ran (enforced_by: nobody) "
                    "and its lookup gave no answer"
                )
        elif step.effect == Effect.READ or step.enforced_by == EnforcedBy.TOOL:
            step_move(step, StepState.INTERRUPTED)
            event_type = EventType.STEP_INTERRUPTED
        elif step.enforced_by == EnforcedBy.NOBODY:
            step_move(step, StepState.UNKNOWN)
            event_type = EventType.STEP_UNKNOWN
            payload["why"] = "the tool cannot tell whether it ran (enforced_by: nobody)"
        else:
            lookup = lookup or key_state_lookup()
            key_state = lookup(step.idempotency_key)
            payload["key_state"] = key_state.state
            if key_state.state == "completed":
                step_move(step, StepState.DONE)
                step.result = key_state.response
                step.outcome_at = now
                event_type = EventType.RECONCILED
            elif key_state.state == "failed":
                step_move(step, StepState.ERROR)
                step.result = key_state.response
                step.outcome_at = now
                event_type = EventType.RECONCILED
            elif key_state.state == "absent" or not key_state.stale:
                # absent: it never ran; fresh in_progress: a re-execution with the same key waits
                # on the tool side's lock instead of running twice
                step_move(step, StepState.INTERRUPTED)
                event_type = EventType.STEP_INTERRUPTED
            else:
                step_move(step, StepState.UNKNOWN)
                event_type = EventType.STEP_UNKNOWN
                payload["why"] = "the key is in progress with a stale lock: it may have been sent"
        if event_type == EventType.RECONCILED:
            payload["result_hash"] = arguments_hash(step.result)  # binds the copied result
        step.save()
        event_append(run, type=event_type, payload=payload, actor=actor, at=now)
        if step.state == StepState.UNKNOWN:
            unknown.append(step)
    return unknown
