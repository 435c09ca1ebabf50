"""Reads other apps make of the journal: typed, so the coupling shows in the imports."""

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from runs.models import Step

# {run uuid}:{index}:{name}:{32 hex} (runs.canonical.idempotency_key)
_JOURNAL_KEY = re.compile(
    r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}):(\d{1,9}):"
)


@dataclass(frozen=True)
class KeyStep:
    """The journal step an idempotency key names, with what the gateway checks of its run."""

    run_id: UUID
    agent: str
    run_epoch: int
    index: int
    name: str
    arguments_hash: str
    state: str
    epoch: int
    result: Any
    outcome_at: datetime | None

    def found(self) -> dict[str, Any]:
        """What the gateway's refusals say was found under the key."""
        return {
            "run": str(self.run_id),
            "index": self.index,
            "name": self.name,
            "arguments_hash": self.arguments_hash,
            "state": self.state,
        }


def step_for_key(*, key: str) -> KeyStep | None:
    """The step whose idempotency_key is `key` (one indexed query), or None (a free-form key)."""
    match = _JOURNAL_KEY.match(key)
    if match is None:
        return None
    row = (
        Step.objects.filter(run_id=match[1], index=int(match[2]), idempotency_key=key)
        .values(
            "run_id",
            "run__agent",
            "run__epoch",
            "index",
            "name",
            "arguments_hash",
            "state",
            "epoch",
            "result",
            "outcome_at",
        )
        .first()
    )
    if row is None:
        return None
    return KeyStep(
        run_id=row["run_id"],
        agent=row["run__agent"],
        run_epoch=row["run__epoch"],
        index=row["index"],
        name=row["name"],
        arguments_hash=row["arguments_hash"],
        state=row["state"],
        epoch=row["epoch"],
        result=row["result"],
        outcome_at=row["outcome_at"],
    )


__all__ = ["KeyStep", "step_for_key"]
