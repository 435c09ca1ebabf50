"""An operator's actions on a run (the console): raise its limits, cancel it, legal hold.

Locks: the caller holds no lock on the run; each service takes the run's row lock through
`kernel.transition`. `run_legal_hold`'s lock is what orders it against retention
(audit.retention), which locks the same row.
"""

from datetime import timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from runs import clock, kernel
from runs.api_errors import ApplicationError, note_required
from runs.constants import BUDGET_LIMITS, FINAL_STATUSES, EventType, RunStatus, StatusReason
from runs.kernel import event_append, run_move, transition
from runs.models import Run
from runs.services._shared import _resume_after_review


def run_limits_raise(*, run_id: UUID | str, by: str, note: str, limits: dict[str, Any]) -> Run:
    """An admin raises one run's limits (never lowers them), audited in its chain.

    A run stopped by a limit that now has room again resumes.
    """
    note_required(note)
    fields = {name: f"limit_{name}" for name in BUDGET_LIMITS}
    with transition(run_id, actor=f"user:{by}") as t:
        run = t.run
        if run.status in FINAL_STATUSES:
            raise ApplicationError("run_finished", f"The run is {run.status}.")
        changes: dict[str, Any] = {}
        errors: dict[str, list[str]] = {}
        for name, value in limits.items():
            if name not in fields or value is None:
                continue
            current = getattr(run, fields[name])
            new = Decimal(str(value)) if name == "cost_usd" else int(value)
            if current is not None and new < current:
                errors[name] = [
                    f"Limits are only raised here: {new} is below the current {current}."
                ]
            elif new != current:
                changes[name] = {"from": None if current is None else str(current), "to": str(new)}
                setattr(run, fields[name], new)
        if errors:
            raise ApplicationError(
                "validation_error", "Limits can only be raised.", status_code=400, details=errors
            )
        if not changes:
            raise ApplicationError(
                "validation_error",
                "Nothing to change.",
                status_code=400,
                details={"limits": ["No limit was raised."]},
            )
        now = clock.now()
        if "wall_seconds" in changes:
            run.deadline = run.created_at + timedelta(seconds=run.limit_wall_seconds)
        event_append(
            run,
            type=EventType.LIMITS_RAISED,
            payload={"changes": changes, "note": note.strip(), "by": by},
            actor=f"user:{by}",
            at=now,
        )
        run.save()  # the kernel's budget rule reads the row: with the raised limits
        still = kernel.exceeded_limit(run.pk, now=now, next_step=True)
        if run.status == RunStatus.BUDGET_EXCEEDED and still is not None:
            # another limit still stops it: the status reason names that one, not the old one
            run.status_reason = still.name
        if (run.status == RunStatus.BUDGET_EXCEEDED and still is None) or (
            run.status == RunStatus.NEEDS_REVIEW
            and run.status_reason == StatusReason.RECOVERIES
            and run.used_recoveries <= run.limit_recoveries
        ):
            _resume_after_review(run, actor=f"user:{by}", now=now, why=StatusReason.LIMITS_RAISED)
        return run


def run_cancel(*, run_id: UUID | str, by: str, note: str) -> Run:
    """An admin stops a run that is not final: it becomes `cancelled` (final).

    The epoch moves, so nothing that carries the old one (a gateway call's `Ledger-Epoch`, a
    heartbeat) passes as current; the worker holding the lease is still refused its next write
    with `run_finished` (the kernel answers so to the epoch the run was cancelled under): it
    learns the run is over, not that someone took it over. The gateway runs no key of a cancelled run. An
    outcome for an intent already in flight under the old epoch is still recorded (the effect
    happened; the journal says so). Unknown steps stay in the review queue: whether an email
    went out is still a question after the run is cancelled.
    """
    note = note_required(note)
    with transition(run_id, actor=f"user:{by}") as t:
        run = t.run
        if run.status in FINAL_STATUSES:
            raise ApplicationError(
                "run_finished",
                f"The run is already {run.status}; only a run that is not finished can be cancelled.",
                details={"status": run.status},
            )
        now = clock.now()
        previous = run.status
        worker = run.lease_worker
        run_move(run, RunStatus.CANCELLED, reason=StatusReason.CANCELLED)
        run.epoch += 1
        event_append(
            run,
            type=EventType.RUN_CANCELLED,
            payload={
                "by": by,
                "note": note,
                "previous_status": previous,
                "worker": worker,
                "epoch": run.epoch,
            },
            actor=f"user:{by}",
            at=now,
        )
        return run


def run_legal_hold(*, run_id: UUID | str, on: bool, by: str, note: str) -> Run:
    """Put a run on legal hold (`on`) or lift it, with who, when and why, and its event.

    Retention never purges a run on hold, nor drops it with its month (audit.retention): its
    rows are moved aside instead. Any run may be held, finished or not; its status, lease and
    epoch do not change, so a worker holding it goes on. The run's row lock orders this against
    retention: a run retention holds is gone when the hold commits (not_found), and a run being
    held is skipped by retention (kept). Refused with `legal_hold_unchanged` when the run is
    already in the state asked for (the message says since when and by whom).
    """
    note = note_required(note)
    with transition(run_id, actor=f"user:{by}") as t:
        run = t.run
        if run.legal_hold == on:
            raise ApplicationError(
                "legal_hold_unchanged",
                _legal_hold_text(run) if on else "The run is not on legal hold.",
                details={"legal_hold": run.legal_hold, "by": run.legal_hold_by},
            )
        run.legal_hold = on
        run.legal_hold_at = t.now if on else None
        run.legal_hold_by = by if on else ""
        run.legal_hold_note = note if on else ""
        t.event(
            EventType.RUN_LEGAL_HOLD_SET if on else EventType.RUN_LEGAL_HOLD_LIFTED,
            {"by": by, "note": note},
        )
        return run


def _legal_hold_text(run: Run) -> str:
    """ "The run is already on legal hold since … (by …)." (a hold set in the database directly
    has no time or name)."""
    since = f" since {run.legal_hold_at:%Y-%m-%d %H:%M} UTC" if run.legal_hold_at else ""
    by = f" (by {run.legal_hold_by})" if run.legal_hold_by else ""
    return f"The run is already on legal hold{since}{by}."
