"""Retention: purge finished runs older than the policy's days, after a signed checkpoint.

Only final runs (completed, failed, abandoned) are purged: never a live run, never one in
review, never one stopped by its budget (an admin may still raise its limits). A run is purged
only when a checkpoint has signed its final head, and each batch leaves a tombstone in the audit
log naming every purged run with its last event seq and head, so the signed checkpoint still
proves what the run was.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, OuterRef

from audit.checkpoints import checkpoint_create
from audit.models import CheckpointLeaf, RetentionPolicy
from review.audit import audit_record
from runs import clock
from runs.api_errors import ApplicationError
from runs.constants import FINAL_STATUSES
from runs.models import Event, Run, Step

PURGE_BATCH = 500


def retention_policy_get() -> RetentionPolicy:
    policy, _ = RetentionPolicy.objects.get_or_create(pk=1)
    return policy


def retention_policy_update(*, user: Any, enabled: bool, keep_days: int) -> RetentionPolicy:
    if not isinstance(keep_days, int) or keep_days < 1 or keep_days > 36500:
        raise ApplicationError(
            "validation_error",
            "Keep runs between 1 and 36500 days.",
            status_code=400,
            details={"keep_days": ["Between 1 and 36500."]},
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


def _purgeable(cutoff: datetime) -> Any:
    signed = CheckpointLeaf.objects.filter(run_id=OuterRef("pk"), event_seq=OuterRef("event_seq"))
    return Run.objects.filter(status__in=list(FINAL_STATUSES), finished_at__lt=cutoff).filter(
        Exists(signed)
    )


def retention_candidates(*, now: datetime | None = None) -> int:
    """How many runs the policy would purge now (before the checkpoint that signs newer heads)."""
    policy = retention_policy_get()
    now = now or clock.now()
    return Run.objects.filter(
        status__in=list(FINAL_STATUSES),
        finished_at__lt=now - timedelta(days=policy.keep_days),
    ).count()


@dataclass(frozen=True)
class PurgeResult:
    purged: int
    checkpoint_seq: int | None
    refused: str = ""


def retention_purge(
    *, actor: Any = "system:retention", now: datetime | None = None, force: bool = False
) -> PurgeResult:
    """Sign a checkpoint, then delete the eligible runs batch by batch, each with a tombstone.

    `force` runs even when the policy is disabled (an admin's explicit "purge now" still needs a
    policy to say how old).
    """
    policy = retention_policy_get()
    if not policy.enabled and not force:
        return PurgeResult(0, None, refused="the retention policy is disabled")
    result = checkpoint_create(actor="system:retention")
    if result.checkpoint is None:
        return PurgeResult(0, None, refused=f"no signed checkpoint: {result.refused}")
    checkpoint = result.checkpoint
    cutoff = (now or clock.now()) - timedelta(days=policy.keep_days)
    purged = 0
    while True:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL agentledger.purge = 'on'")
            runs = list(
                _purgeable(cutoff)
                .select_for_update(skip_locked=True)
                .order_by("pk")
                .values("pk", "agent", "status", "finished_at", "event_seq", "event_head")[
                    :PURGE_BATCH
                ]
            )
            if not runs:
                break
            ids = [r["pk"] for r in runs]
            Event.objects.filter(run_id__in=ids).delete()
            Step.objects.filter(run_id__in=ids).delete()
            Run.objects.filter(pk__in=ids).delete()
            audit_record(
                actor=actor,
                action="retention.purge",
                target=f"checkpoint:{checkpoint.seq}",
                note=f"purged {len(runs)} runs finished before {cutoff:%Y-%m-%d %H:%M} UTC "
                f"(keep {policy.keep_days} days)",
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
        purged += len(runs)
    return PurgeResult(purged, checkpoint.seq)
