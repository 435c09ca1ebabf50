"""A worker's lease: the grant (with the recovery rules after a lost holder) and its heartbeat.

Both are the kernel's statements (`ledger_lease`, `ledger_heartbeat` in runs/sql/ledger.sql):
the grant, the recovery rules, the recovery budget and the epoch fence are decided there, in
one transaction under the run's row lock. What the recovery rules must learn from the tool side
is asked before that statement, with no lock held (runs.services.recovery).

Locks: the caller holds no lock on the run and is in no transaction (the tool side is asked
between two statements); the kernel's statements lock the run themselves.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from runs import kernel
from runs.api_errors import ApplicationError
from runs.models import Run, Step
from runs.services.recovery import HolderStillJournalling, lookup_tools, with_tool_side_answers


@dataclass(frozen=True)
class LeaseGrant:
    run: Run
    epoch: int
    expires_at: datetime
    journal: list[Step]
    recovered: bool


def run_lease_acquire(
    *, run_id: UUID | str, worker: str, ttl_seconds: int, actor: str
) -> LeaseGrant:
    """Grant the lease, fencing every earlier holder with a new epoch.

    A lease after an expired one (or after the reaper interrupted the run, or a restart of the
    holder) runs the recovery rules first and counts one recovery. A holder still journalling
    under its expired lease (runs.services.recovery.HolderStillJournalling) is refused like a
    live one: 409 `lease_held`, nothing changed.
    """
    tools = lookup_tools()

    def grant(answers: dict[str, Any]) -> tuple[Run, bool]:
        return kernel.lease(
            run_id=run_id,
            worker=worker,
            ttl_seconds=ttl_seconds,
            actor=actor,
            answers=answers,
            lookup_tools=tools,
        )

    try:
        run, recovered = with_tool_side_answers(grant)
    except HolderStillJournalling as busy:
        raise _still_journalling(run_id, busy) from None
    assert run.lease_expires_at is not None
    journal = list(Step.objects.filter(run_id=run.pk).order_by("index")) if run.step_count else []
    return LeaseGrant(
        run=run,
        epoch=run.epoch,
        expires_at=run.lease_expires_at,
        journal=journal,
        recovered=recovered,
    )


def run_heartbeat(*, run_id: UUID | str, epoch: int) -> kernel.HeartbeatAnswer:
    """Extend the lease; no event (a heartbeat changes no state anyone reviews)."""
    return kernel.heartbeat(run_id=run_id, epoch=epoch)


def _still_journalling(run_id: UUID | str, busy: HolderStillJournalling) -> ApplicationError:
    holder = Run.objects.filter(pk=run_id).only("lease_worker", "lease_expires_at").first()
    expires_at = holder.lease_expires_at if holder else None
    return ApplicationError(
        "lease_held",
        "The run's holder is still journalling writes under its expired lease; try again once "
        "it has stopped.",
        details={
            "worker": holder.lease_worker if holder else None,
            "expires_at": expires_at.isoformat() if expires_at else None,
            "reason": "still_journalling",
            "steps": [step["index"] for step in busy.steps],
        },
    )
