"""Retention: drop whole months of the journal older than the policy, after a signed checkpoint.

Steps and events are partitioned by their run's month (runs 0001); retention detaches and drops
a month's partitions instead of deleting rows (no dead tuples, no vacuum debt). Only final runs
(completed, failed, abandoned, cancelled) go: never a live run, never one in review, never one
stopped by its budget (an admin may still raise its limits), never one on legal hold, never one
whose head no checkpoint has signed, never one with forks. Those are moved aside into the keep
partitions before their month is dropped, rows unchanged, so their chains still verify. Each
batch of purged runs leaves a tombstone in the audit log naming every run with its last event
seq and head, so the signed checkpoint still proves what the run was.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Exists, OuterRef

from audit.checkpoints import checkpoint_create
from audit.models import Checkpoint, CheckpointLeaf, RetentionPolicy
from dashboard.audit import audit_record
from review.models import Escalation
from runs import clock
from runs.api_errors import invalid
from runs.constants import FINAL_STATUSES
from runs.models import ApprovalRequest, Event, Run, Step
from runs.services.actions import run_legal_hold

PURGE_BATCH = 500


def retention_policy_get() -> RetentionPolicy:
    policy, _ = RetentionPolicy.objects.get_or_create(pk=1)
    return policy


def retention_floor_days() -> int:
    """AUDIT_MIN_RETENTION_DAYS: no run younger than this is purged, whatever the policy says
    (EU AI Act Art. 19(1) and 26(6): automatically generated logs kept at least six months)."""
    return int(settings.AUDIT_MIN_RETENTION_DAYS)


def retention_cutoff(*, keep_days: int, now: datetime) -> datetime:
    """Runs finished before this instant may go: the policy's age, never less than the floor
    (a policy saved under a lower floor, or a row edited by hand, still cannot purge younger)."""
    return now - timedelta(days=max(keep_days, retention_floor_days()))


def retention_policy_update(*, user: Any, enabled: bool, keep_days: int) -> RetentionPolicy:
    floor = retention_floor_days()
    if not isinstance(keep_days, int) or keep_days < floor or keep_days > 36500:
        raise invalid(
            "keep_days",
            f"Keep runs between {floor} and 36500 days: AUDIT_MIN_RETENTION_DAYS is {floor} "
            "(the EU AI Act's Articles 19(1) and 26(6) ask for logs kept at least six months).",
            f"Between {floor} (the retention floor, AUDIT_MIN_RETENTION_DAYS) and 36500.",
        )
    with transaction.atomic():
        policy, _ = RetentionPolicy.objects.select_for_update().get_or_create(pk=1)
        before = {"enabled": policy.enabled, "keep_days": policy.keep_days}
        policy.enabled = enabled
        policy.keep_days = keep_days
        policy.updated_by = user.get_username()
        policy.save()
        audit_record(
            actor=user,
            action="retention.update",
            target="retention:1",
            details={"from": before, "to": {"enabled": enabled, "keep_days": keep_days}},
        )
    return policy


def legal_hold_change(*, actor: AbstractBaseUser, run_id: UUID | str, on: bool, note: str) -> Run:
    """An admin puts a run on legal hold (`on`) or lifts it: the rule and the run's event are
    runs.services.actions.run_legal_hold; its audit entry is written in the same transaction."""
    with transaction.atomic():
        run = run_legal_hold(run_id=run_id, on=on, by=actor.get_username(), note=note)
        audit_record(
            actor=actor,
            action="run.legal_hold" if on else "run.legal_hold_lift",
            target=f"run:{run.pk}",
            note=note,
            details={"legal_hold": on, "status": run.status, "event_seq": run.event_seq},
        )
    return run


def _purgeable(cutoff: datetime) -> Any:
    """Final runs finished before `cutoff` and created and finished before the retention floor,
    signed by a checkpoint, not on legal hold, not in an open incident, no fork."""
    from audit.incidents import runs_held_by_open_incidents

    floor = clock.now() - timedelta(days=retention_floor_days())
    signed = CheckpointLeaf.objects.filter(run_id=OuterRef("pk"), event_seq=OuterRef("event_seq"))
    forks = Run.objects.filter(forked_from=OuterRef("pk"))
    return (
        Run.objects.filter(
            status__in=list(FINAL_STATUSES),
            finished_at__lt=min(cutoff, floor),
            created_at__lt=floor,
            legal_hold=False,
        )
        .filter(Exists(signed), ~Exists(forks))
        .exclude(pk__in=runs_held_by_open_incidents())
    )


def retention_candidates(*, now: datetime | None = None) -> int:
    """How many runs the policy would purge now (before the checkpoint that signs newer heads)."""
    policy = retention_policy_get()
    now = now or clock.now()
    return Run.objects.filter(
        status__in=list(FINAL_STATUSES),
        finished_at__lt=retention_cutoff(keep_days=policy.keep_days, now=now),
    ).count()


@dataclass(frozen=True)
class PurgeResult:
    purged: int
    checkpoint_seq: int | None
    refused: str = ""
    # months whose partitions were detached and dropped, and the runs kept back from them
    months_dropped: tuple[date, ...] = ()
    kept: int = 0


def _tombstone(
    *,
    actor: Any,
    checkpoint: Checkpoint,
    policy: RetentionPolicy,
    cutoff: datetime,
    runs: list[dict[str, Any]],
    how: str,
) -> None:
    audit_record(
        actor=actor,
        action="retention.purge",
        target=f"checkpoint:{checkpoint.seq}",
        note=f"purged {len(runs)} runs finished before {cutoff:%Y-%m-%d %H:%M} UTC "
        f"(keep {policy.keep_days} days) {how}",
        details={
            "checkpoint": {"seq": checkpoint.seq, "hash": checkpoint.hash},
            "keep_days": policy.keep_days,
            "cutoff": cutoff.isoformat(),
            "runs": [
                {
                    "id": str(r["pk"]),
                    "agent": r["agent"],
                    "status": r["status"],
                    "finished_at": r["finished_at"].isoformat(),
                    "event_seq": r["event_seq"],
                    "head": r["event_head"],
                }
                for r in runs
            ],
        },
    )


_RUN_FIELDS = ("pk", "agent", "status", "finished_at", "event_seq", "event_head")


def journal_months() -> list[date]:
    """The months that have their own partition (runs_event_yYYYYmMM), oldest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = 'runs_event'::regclass AND c.relname ~ '^runs_event_y[0-9]{4}m[0-9]{2}$'
            """
        )
        names = [name for (name,) in cursor.fetchall()]
    return sorted(date(int(n[-7:-3]), int(n[-2:]), 1) for n in names)


def journal_partitions_ensure(*, now: datetime | None = None, ahead: int = 3) -> int:
    """This month's partitions and the next `ahead` months', made before rows need them."""
    today = (now or clock.now()).astimezone(UTC).date()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ledger_journal_partitions_ensure(%s, (%s::date + make_interval(months => %s))::date)",
            [today, today, ahead],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _next_month(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def _approvals_step_aside(cursor: Any, *, kept: list[Any], month: date) -> None:
    """The kept runs' approval requests of `month`, and their approvals, copied into temporary
    tables and deleted: their foreign key to runs_step (runs 0001) points into the month's
    partition, and PostgreSQL refuses to detach a partition whose rows are still referenced
    (deferred or not). `_approvals_step_back` puts them back, rows unchanged, once the steps
    are in the keep partition."""
    # the lock the detach takes anyway, taken first: no step of this month, so no approval
    # request for one, can be written between the copy and the detach
    cursor.execute("LOCK TABLE runs_step IN ACCESS EXCLUSIVE MODE")
    cursor.execute(
        "CREATE TEMP TABLE kept_approvalrequest ON COMMIT DROP AS "
        "SELECT ar.* FROM unnest(%s::uuid[]) k (id) "
        "JOIN runs_approvalrequest ar ON ar.run_id = k.id AND ar.journal_month = %s",
        [kept, month],
    )
    cursor.execute(
        "CREATE TEMP TABLE kept_approval ON COMMIT DROP AS SELECT a.* FROM kept_approvalrequest k "
        "JOIN runs_approval a ON a.run_id = k.run_id AND a.request_id = k.id"
    )
    # their approvals go with them (ON DELETE CASCADE)
    cursor.execute(
        "DELETE FROM runs_approvalrequest ar USING kept_approvalrequest k "
        "WHERE ar.run_id = k.run_id AND ar.id = k.id"
    )


def _approvals_step_back(cursor: Any) -> None:
    """The approval requests and approvals `_approvals_step_aside` took out, back as they were
    (their steps are in the keep partition now)."""
    cursor.execute("INSERT INTO runs_approvalrequest SELECT * FROM kept_approvalrequest")
    cursor.execute("INSERT INTO runs_approval SELECT * FROM kept_approval")
    cursor.execute("DROP TABLE kept_approvalrequest, kept_approval")


def _month_drop(
    month: date, *, cutoff: datetime, checkpoint: Checkpoint, policy: RetentionPolicy, actor: Any
) -> tuple[int, int]:
    """Drop one month's partitions; its runs that may not go are moved aside first.

    One transaction: the purgeable runs of the month are locked (a run someone holds is kept);
    their approval requests and escalations go; the other runs' approval requests step aside
    (their foreign key would refuse the detach); both partitions are detached; the rows of every
    other run of the month (in review, on legal hold, live, unsigned, finished after the cutoff)
    are copied into the keep partitions, events in chain order so the chain trigger checks them
    again, and their approval requests come back; the detached tables are dropped; the purged
    runs' rows go with a tombstone each 500.
    """
    suffix = f"y{month:%Y}m{month:%m}"
    with transaction.atomic():
        purged = list(
            _purgeable(cutoff)
            .filter(journal_month=month)
            .select_for_update(skip_locked=True, of=("self",))
            .order_by("pk")
            .values(*_RUN_FIELDS)
        )
        ids = [r["pk"] for r in purged]
        gone = set(ids)
        kept = [
            pk
            for pk in Run.objects.filter(journal_month=month).values_list("pk", flat=True)
            if pk not in gone
        ]
        ApprovalRequest.objects.filter(run_id__in=ids).delete()
        Escalation.objects.filter(run_id__in=ids).delete()
        with connection.cursor() as cursor:
            _approvals_step_aside(cursor, kept=kept, month=month)
            for table in ("runs_step", "runs_event"):
                cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {table}_{suffix}")
            # the kept runs' rows, found through each detached table's (run_id, ...) key;
            # suffix is built from a date, never from input
            cursor.execute(
                f"INSERT INTO runs_step SELECT s.* FROM unnest(%s::uuid[]) k (id) "  # noqa: S608
                f"JOIN runs_step_{suffix} s ON s.run_id = k.id",
                [kept],
            )
            cursor.execute(
                f"INSERT INTO runs_event SELECT e.* FROM unnest(%s::uuid[]) k (id) "  # noqa: S608
                f"JOIN runs_event_{suffix} e ON e.run_id = k.id ORDER BY e.run_id, e.seq",
                [kept],
            )
            _approvals_step_back(cursor)
            # deferred foreign key checks of rows written in this transaction run now: a table
            # with pending trigger events cannot be dropped
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"DROP TABLE runs_step_{suffix}, runs_event_{suffix}")
            cursor.execute("DELETE FROM runs_run WHERE id = ANY(%s)", [ids])
        for first in range(0, len(purged), PURGE_BATCH):
            _tombstone(
                actor=actor,
                checkpoint=checkpoint,
                policy=policy,
                cutoff=cutoff,
                runs=purged[first : first + PURGE_BATCH],
                how=f"with the journal partitions of {month:%Y-%m}",
            )
    return len(purged), len(kept)


def _kept_purge(
    *, cutoff: datetime, checkpoint: Checkpoint, policy: RetentionPolicy, actor: Any
) -> int:
    """Runs kept back from a dropped month that may go now: row by row (they are few)."""
    partitioned = journal_months()
    purged = 0
    while True:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL agentledger.purge = 'on'")
            runs = list(
                _purgeable(cutoff)
                .exclude(journal_month__in=partitioned)
                .filter(journal_month__lt=cutoff.date())
                .select_for_update(skip_locked=True, of=("self",))
                .order_by("pk")
                .values(*_RUN_FIELDS)[:PURGE_BATCH]
            )
            if not runs:
                break
            ids = [r["pk"] for r in runs]
            Event.objects.filter(run_id__in=ids).delete()
            Step.objects.filter(run_id__in=ids).delete()
            Run.objects.filter(pk__in=ids).delete()
            _tombstone(
                actor=actor,
                checkpoint=checkpoint,
                policy=policy,
                cutoff=cutoff,
                runs=runs,
                how="kept back earlier, row by row",
            )
        purged += len(runs)
    return purged


def retention_purge(
    *, actor: Any = "system:retention", now: datetime | None = None, force: bool = False
) -> PurgeResult:
    """Sign a checkpoint, then drop every journal month older than the policy, whole.

    A month goes when it ended before the cutoff (now - keep_days): its partitions of runs_step
    and runs_event are detached and dropped, after the runs that may not go are moved aside
    (see _month_drop); so a run is kept between keep_days and keep_days + one month. Runs moved
    aside earlier go row by row once they may. `force` runs even when the policy is disabled (an
    admin's explicit "purge now" still needs a policy to say how old).
    """
    now = now or clock.now()
    journal_partitions_ensure(now=now)  # the months ahead, whether retention is on or not
    policy = retention_policy_get()
    if not policy.enabled and not force:
        return PurgeResult(0, None, refused="the retention policy is disabled")
    result = checkpoint_create(actor="system:retention")
    if result.checkpoint is None:
        return PurgeResult(0, None, refused=f"no signed checkpoint: {result.refused}")
    checkpoint = result.checkpoint
    cutoff = retention_cutoff(keep_days=policy.keep_days, now=now)
    return retention_months_drop(cutoff=cutoff, checkpoint=checkpoint, policy=policy, actor=actor)


def retention_months_drop(
    *,
    cutoff: datetime,
    checkpoint: Checkpoint,
    policy: RetentionPolicy,
    actor: Any,
    on_month: Callable[[date, int, int], None] | None = None,
) -> PurgeResult:
    """Every month that ended before `cutoff`, dropped (runs that may not go moved aside), then
    the runs moved aside earlier that may go now. `checkpoint` must already sign the heads.
    A cutoff later than the retention floor is moved back to it."""
    cutoff = min(cutoff, clock.now() - timedelta(days=retention_floor_days()))
    purged = kept = 0
    dropped = []
    for month in journal_months():
        if _next_month(month) > cutoff.astimezone(UTC).date():
            break
        gone, held = _month_drop(
            month, cutoff=cutoff, checkpoint=checkpoint, policy=policy, actor=actor
        )
        if on_month is not None:
            on_month(month, gone, held)
        purged += gone
        kept += held
        dropped.append(month)
    purged += _kept_purge(cutoff=cutoff, checkpoint=checkpoint, policy=policy, actor=actor)
    return PurgeResult(purged, checkpoint.seq, months_dropped=tuple(dropped), kept=kept)
