"""Reads for the console: a run's timeline and lineage, and the fleet overview's aggregates."""

import json
from typing import Any

from console.timeline import timeline_build, timeline_geometry
from review import toolside
from runs import clock
from runs.constants import StepKind
from runs.models import Event, Run, Step
from runs.selectors import fork_writes_after


def run_timeline_context(run: Run) -> dict[str, Any]:
    """Everything the transcript's timeline draws: two queries, plus one for the tool side's keys."""
    now = clock.now()
    steps = list(
        Step.objects.filter(run=run)
        .order_by("index")
        .only(
            "index",
            "kind",
            "name",
            "effect",
            "state",
            "intent_at",
            "outcome_at",
            "usage_input_tokens",
            "usage_output_tokens",
            "executions",
            "idempotency_key",
            "arguments",
            "result",
        )
    )
    events = list(
        Event.objects.filter(run=run).order_by("seq").only("seq", "type", "payload", "at")
    )
    keys = toolside.key_states([s.idempotency_key for s in steps if s.effect == "write"])
    replays = {key: info.replays for key, info in keys.items() if info.replays}
    tl = timeline_build(run=run, steps=steps, events=events, now=now, key_replays=replays)
    replayed = {b.index for b in tl.bars if b.replayed or b.copied}
    return {
        **timeline_geometry(tl, now=now),
        "conversation": [_conversation_entry(s, s.index in replayed) for s in steps],
    }


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _conversation_entry(step: Step, replayed: bool) -> dict[str, Any]:
    """A model step as its messages and reply; a tool step as its call and result."""
    entry: dict[str, Any] = {
        "index": step.index,
        "name": step.name,
        "kind": step.kind,
        "tokens": step.usage_input_tokens + step.usage_output_tokens,
        "replayed": replayed,
        "messages": [],
        "call": "",
        "reply": "",
        "reply_role": "result",
    }
    arguments = step.arguments if isinstance(step.arguments, dict) else {}
    result = step.result
    if step.kind == StepKind.MODEL:
        messages = arguments.get("messages")
        if isinstance(messages, list):
            entry["messages"] = [
                {"role": str(m.get("role", "?")), "content": _text(m.get("content", ""))}
                for m in messages
                if isinstance(m, dict)
            ]
        else:
            entry["call"] = _text(arguments)
        if isinstance(result, dict) and "content" in result:
            entry["reply"] = _text(result["content"])
            entry["reply_role"] = "assistant"
        elif result is not None:
            entry["reply"] = _text(result)
    else:
        entry["call"] = f"{step.name}({_text(arguments)})"
        entry["reply"] = "" if result is None else _text(result)
    return entry


def run_lineage(run: Run) -> dict[str, Any]:
    """Where a fork came from, and the forks made from this run (both ways)."""
    forks = list(
        Run.objects.filter(forked_from=run)
        .order_by("created_at")
        .values("id", "forked_from_index", "status", "created_at")[:50]
    )
    return {"origin": run.forked_from_id, "origin_index": run.forked_from_index, "forks": forks}


def fork_plan(run: Run, index: int) -> dict[str, Any]:
    """What a fork of `run` at `index` would meet: the original's writes from there on (each
    tool needs a choice, runs.services.forks.run_fork) and who will run the fork."""
    from celery_agents.registry import is_registered

    if is_registered(run.agent):
        runs_on = (
            f"The ledger's Celery workers run agent {run.agent}: one takes the fork as soon as "
            "it is created."
        )
    else:
        runs_on = (
            f"No worker of the ledger runs agent {run.agent}: the fork waits (pending) until "
            "one of your own workers attaches to it by its id."
        )
    return {
        "index": index,
        "writes": fork_writes_after(run_id=run.pk, index=index),
        "runs_on": runs_on,
    }
