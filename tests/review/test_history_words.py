"""A run's history in words: each event type says what happened, from its own payload."""

from datetime import UTC, datetime

from review.selectors import run_history
from runs.constants import EventType
from runs.models import Event

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _said(type: str, **payload: object) -> tuple[str, str]:
    (line,) = run_history([Event(type=type, payload=payload, at=AT)])
    return line.text, line.kind


def test_leases_say_who_took_the_run_and_whether_it_was_a_recovery() -> None:
    assert _said(EventType.LEASE_ACQUIRED, worker="w-1", epoch=1) == (
        "leased by w-1 (epoch 1)",
        "lease",
    )
    assert _said(
        EventType.LEASE_ACQUIRED, worker="w-2", epoch=2, recovery=True, replayable_steps=3
    ) == ("recovered by w-2 (epoch 2); 3 steps replayed", "lease")


def test_people_s_decisions_name_who_and_why() -> None:
    assert _said(EventType.RUN_CANCELLED, by="ada", note="withdrawn") == (
        "cancelled by ada: withdrawn",
        "final",
    )
    assert _said(EventType.RUN_LEGAL_HOLD_SET, by="ada", note="matter 7") == (
        "put on legal hold by ada: matter 7",
        "hold",
    )
    assert _said(EventType.RUN_LEGAL_HOLD_LIFTED, by="ada", note="closed") == (
        "hold lifted by ada: closed",
        "hold",
    )


def test_a_missing_payload_key_reads_as_none_and_unlisted_events_say_nothing() -> None:
    assert _said(EventType.BUDGET_EXCEEDED) == ("budget exceeded: None", "budget")
    assert _said(EventType.RUN_COMPLETED) == ("run completed", "final")
    assert run_history([Event(type=EventType.STEP_DONE, payload={"index": 0}, at=AT)]) == []
