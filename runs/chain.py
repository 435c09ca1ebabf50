"""Recompute a run's hash chain from its stored events: the check behind verify_journal.

The chain also vouches for the run's steps: replaying the events per step index (runs.binding)
gives what every step row must hold, and a row that disagrees is a break naming step and field.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple
from uuid import UUID

from runs.binding import StepReplay
from runs.canonical import GENESIS_HASH, event_body, event_hash
from runs.models import Event, Run, Step
from runs.representations import step_json


@dataclass(frozen=True)
class ChainBreak:
    run_id: str
    seq: int
    problem: str


class StepRow(NamedTuple):
    """A step's columns as plain values (`values_list(*STEP_COLUMNS)`), without building model
    instances: what the binding check reads, and every column the audit export writes."""

    run_id: UUID
    index: int  # type: ignore[assignment]  # shadows tuple.index, on purpose
    kind: str
    name: str
    effect: str
    enforced_by: str | None
    arguments: Any
    arguments_hash: str
    idempotency_key: str
    state: str
    result: Any
    usage_input_tokens: int
    usage_output_tokens: int
    usage_cost_usd: Decimal
    epoch: int
    executions: int
    intent_at: datetime
    outcome_at: datetime | None
    resolution_action: str | None
    resolution_by: str | None
    resolution_note: str | None
    resolution_at: datetime | None


class EventRow(NamedTuple):
    """An event's columns as plain values (`values_list(*EVENT_COLUMNS)`): what chain_breaks reads."""

    run_id: UUID
    seq: int
    type: str
    payload: Any
    actor: str
    at: datetime
    prev_hash: str
    hash: str


STEP_COLUMNS = StepRow._fields
EVENT_COLUMNS = EventRow._fields


def chain_breaks(
    run_id: UUID | str,
    events: Iterable[Event],
    *,
    head: str | None = None,
    steps: Iterable[Any] | None = None,
) -> Iterator[ChainBreak]:
    """Every place the chain does not hold: a gap in seq, a wrong prev_hash, a wrong hash.

    With `steps` (Step instances or StepRows), also every step field the events do not vouch for.
    """
    prev = GENESIS_HASH
    expected_seq = 1
    replay = StepReplay() if steps is not None else None
    for event in events:
        if event.seq != expected_seq:
            yield ChainBreak(
                str(run_id), event.seq, f"seq {event.seq} where {expected_seq} was expected"
            )
            expected_seq = event.seq
        if event.prev_hash != prev:
            yield ChainBreak(str(run_id), event.seq, "prev_hash does not name the previous event")
        body = event_body(
            run_id=run_id,
            seq=event.seq,
            type=event.type,
            payload=event.payload,
            actor=event.actor,
            at=event.at,
        )
        if event_hash(prev_hash=event.prev_hash, body=body) != event.hash:
            yield ChainBreak(str(run_id), event.seq, "hash does not match the event's content")
        if replay is not None:
            replay.feed(seq=event.seq, type=event.type, payload=event.payload, at=body["at"])
        prev = event.hash
        expected_seq += 1
    if head is not None and head != prev:
        yield ChainBreak(
            str(run_id), expected_seq - 1, "the run's chain head does not match its last event"
        )
    if replay is not None and steps is not None:
        for seq, problem in replay.mismatches(step_json(s) for s in steps):
            yield ChainBreak(str(run_id), seq, problem)


def run_chain_breaks(run: Run) -> list[ChainBreak]:
    events = Event.objects.filter(run=run).order_by("seq").iterator(chunk_size=2000)
    steps = Step.objects.filter(run=run).order_by("index")
    return list(chain_breaks(run.pk, events, head=run.event_head, steps=steps))
