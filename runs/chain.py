"""Recompute a run's hash chain from its stored events: the check behind verify_journal."""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from uuid import UUID

from runs.canonical import GENESIS_HASH, event_hash
from runs.models import Event, Run
from runs.services import event_body


@dataclass(frozen=True)
class ChainBreak:
    run_id: str
    seq: int
    problem: str


def chain_breaks(
    run_id: UUID | str, events: Iterable[Event], *, head: str | None = None
) -> Iterator[ChainBreak]:
    """Every place the chain does not hold: a gap in seq, a wrong prev_hash, a wrong hash."""
    prev = GENESIS_HASH
    expected_seq = 1
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
        prev = event.hash
        expected_seq += 1
    if head is not None and head != prev:
        yield ChainBreak(
            str(run_id), expected_seq - 1, "the run's chain head does not match its last event"
        )


def run_chain_breaks(run: Run) -> list[ChainBreak]:
    events = Event.objects.filter(run=run).order_by("seq").iterator(chunk_size=2000)
    return list(chain_breaks(run.pk, events, head=run.event_head))
