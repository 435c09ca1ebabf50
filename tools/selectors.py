"""What the tool side tells other apps: typed reads of its key store and its tickets.

Review (the desk's "what the tool side knows") and the journal's recovery
(`settings.LEDGER_KEY_STATE_LOOKUP`) call these instead of guessing the attribute names of this
app's models; a renamed field breaks here, under mypy and this app's tests.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runs import clock
from runs.recovery import KeyState
from tools.idempotency import _is_stale
from tools.models import IdempotencyKey, KeyStatus, Ticket


@dataclass(frozen=True)
class KeyRecord:
    """One idempotency key as the tool side holds it (`absent` when it holds none)."""

    state: str  # absent | in_progress | completed | failed (review adds: unavailable)
    response: Any = None
    replays: int = 0  # duplicate calls the tool side answered from its store
    locked_at: datetime | None = None
    created_at: datetime | None = None
    internal_error: str = ""  # a tool's exception text: shown to staff, never sent to callers


ABSENT = KeyRecord(state="absent")


def key_records(keys: list[str]) -> dict[str, KeyRecord]:
    """Every key asked for, in one query; a key the store does not hold is `absent`."""
    rows = {row.key: row for row in IdempotencyKey.objects.filter(key__in=keys)}
    return {
        key: ABSENT
        if (row := rows.get(key)) is None
        else KeyRecord(
            state=row.state,
            response=row.response,
            replays=row.replay_count,
            locked_at=row.locked_at,
            created_at=row.created_at,
            internal_error=row.internal_error,
        )
        for key in keys
    }


def key_state_for_recovery(key: str) -> KeyState:
    """What the journal's recovery asks (the default `settings.LEDGER_KEY_STATE_LOOKUP`).

    completed → the tool's result (the step's result); failed → the stored error body;
    in_progress → stale when the lock is older than the lock timeout.
    """
    row = IdempotencyKey.objects.filter(key=key).first()
    if row is None:
        return KeyState(state="absent")
    if row.state == KeyStatus.IN_PROGRESS:
        return KeyState(state="in_progress", stale=_is_stale(row, clock.now()))
    if row.state == KeyStatus.COMPLETED:
        return KeyState(state="completed", response=(row.response or {}).get("result"))
    return KeyState(state="failed", response=row.response)


def ticket_get(ticket_id: Any) -> Ticket | None:
    return Ticket.objects.filter(pk=ticket_id).first()
