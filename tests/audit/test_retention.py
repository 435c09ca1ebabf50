"""Retention drops whole old months of the journal, after a signed checkpoint, leaving a tombstone.

Runs that may not go (in review, on legal hold, live, over budget) are moved aside into the keep
partitions first and still verify; the recent months are not touched.
"""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import connection
from django.test import Client
from django.utils import timezone

from audit.models import Checkpoint, CheckpointLeaf, RetentionPolicy
from audit.retention import retention_purge
from bench.testdata import runs_bulk_create
from dashboard.audit import AuditEntry
from runs.chain import run_chain_breaks
from runs.models import Approval, ApprovalRequest, Event, Run, Step
from tests.database import guards_off


def _age(ids: list[Any], days: int) -> None:
    Run.objects.filter(pk__in=ids).update(finished_at=timezone.now() - timedelta(days=days))


def _created(days_ago: int) -> Any:
    return timezone.now() - timedelta(days=days_ago)


def _partition_of_events(run_id: Any) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT tableoid::regclass::text FROM runs_event WHERE run_id = %s", [run_id]
        )
        return {name for (name,) in cursor.fetchall()}


def _partitions() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent IN ('runs_event'::regclass, 'runs_step'::regclass)"
        )
        return {name for (name,) in cursor.fetchall()}


def test_old_finished_runs_are_purged_after_a_checkpoint_and_leave_a_tombstone(db: Any) -> None:
    RetentionPolicy.objects.create(pk=1, enabled=True, keep_days=200)
    old = _created(days_ago=320)
    old_done = runs_bulk_create(runs=4, steps_per_run=2, status="completed", created_at=old)
    old_failed = runs_bulk_create(runs=2, steps_per_run=1, status="failed", created_at=old)
    recent = runs_bulk_create(runs=3, steps_per_run=1, status="completed")
    in_review = runs_bulk_create(runs=2, steps_per_run=1, status="needs_review", created_at=old)
    live = runs_bulk_create(runs=2, steps_per_run=1, status="running", created_at=old)
    over_budget = runs_bulk_create(
        runs=1, steps_per_run=1, status="budget_exceeded", created_at=old
    )
    _age(recent, days=3)
    heads = {str(r.pk): r.event_head for r in Run.objects.filter(pk__in=old_done + old_failed)}

    result = retention_purge()

    assert result.purged == 6 and not result.refused
    assert result.months_dropped == (Run.objects.get(pk=in_review[0]).journal_month,)
    assert result.checkpoint_seq is not None
    checkpoint = Checkpoint.objects.get(seq=result.checkpoint_seq)
    assert set(Run.objects.values_list("pk", flat=True)) == set(
        recent + in_review + live + over_budget
    )
    purged = old_done + old_failed
    assert not Event.objects.filter(run_id__in=purged).exists()
    assert not Step.objects.filter(run_id__in=purged).exists()
    # the signed leaves outlive the runs: proof of what each purged run's history was
    leaves = {
        str(leaf.run_id): leaf.head for leaf in CheckpointLeaf.objects.filter(run_id__in=purged)
    }
    assert leaves == heads
    tombstone = AuditEntry.objects.get(action="retention.purge")
    assert tombstone.actor_name == "system:retention"
    assert tombstone.target == f"checkpoint:{checkpoint.seq}"
    assert tombstone.details["checkpoint"]["hash"] == checkpoint.hash
    assert {r["id"]: r["head"] for r in tombstone.details["runs"]} == heads


def test_nothing_is_purged_while_the_policy_is_off(db: Any) -> None:
    runs_bulk_create(runs=2, steps_per_run=1, created_at=_created(days_ago=900))
    result = retention_purge()
    assert result.purged == 0 and "disabled" in result.refused
    assert Run.objects.count() == 2 and not Checkpoint.objects.exists()


def test_a_broken_chain_stops_the_purge(db: Any) -> None:
    RetentionPolicy.objects.create(pk=1, enabled=True, keep_days=190)
    ids = runs_bulk_create(runs=3, steps_per_run=1, created_at=_created(days_ago=270))
    with connection.cursor() as cursor, guards_off(cursor, "runs_event"):
        cursor.execute(
            "UPDATE runs_event SET actor = 'mallory' WHERE run_id = %s AND seq = 2", [ids[1]]
        )
    result = retention_purge()
    assert result.purged == 0 and "no signed checkpoint" in result.refused
    assert Run.objects.count() == 3
    assert not AuditEntry.objects.filter(action="retention.purge").exists()


def test_only_admins_set_the_policy_and_it_is_audited(client_for: Callable[[str], Client]) -> None:
    assert client_for("auditors").get("/audit/retention/").status_code == 403
    admin = client_for("admins")
    assert admin.get("/audit/retention/").status_code == 200
    assert admin.post("/audit/retention/", {"keep_days": "0"}).status_code == 400
    response = admin.post("/audit/retention/", {"enabled": "on", "keep_days": "245"})
    assert response.status_code == 302
    policy = RetentionPolicy.objects.get()
    assert policy.enabled and policy.keep_days == 245 and policy.updated_by == "admins-user"
    entry = AuditEntry.objects.get(action="retention.update")
    assert entry.details["to"] == {"enabled": True, "keep_days": 245}

    runs_bulk_create(runs=2, steps_per_run=1, created_at=_created(days_ago=300))
    admin.post("/audit/retention/", {"purge": "1"})
    assert Run.objects.count() == 0
    assert AuditEntry.objects.get(action="retention.purge").actor_name == "admins-user"


def test_old_months_are_dropped_whole_and_runs_in_review_or_on_hold_are_moved_aside(
    db: Any,
) -> None:
    RetentionPolicy.objects.create(pk=1, enabled=True, keep_days=200)
    old = _created(days_ago=300)
    gone = runs_bulk_create(runs=5, steps_per_run=3, status="completed", created_at=old)
    in_review = runs_bulk_create(runs=2, steps_per_run=3, status="needs_review", created_at=old)
    on_hold = runs_bulk_create(runs=1, steps_per_run=3, status="completed", created_at=old)
    Run.objects.filter(pk__in=on_hold).update(legal_hold=True)
    recent = runs_bulk_create(runs=3, steps_per_run=2, status="completed")
    old_month = Run.objects.get(pk=gone[0]).journal_month
    suffix = f"y{old_month:%Y}m{old_month:%m}"
    assert {f"runs_event_{suffix}", f"runs_step_{suffix}"} <= _partitions()
    assert _partition_of_events(in_review[0]) == {f"runs_event_{suffix}"}
    recent_events = {str(e.pk): e.hash for e in Event.objects.filter(run_id__in=recent)}
    kept_events = Event.objects.filter(run_id__in=in_review + on_hold).count()

    result = retention_purge()

    assert result.months_dropped == (old_month,) and result.purged == 5 and result.kept == 3
    # the month's partitions are gone: detached and dropped, not emptied row by row
    assert not {f"runs_event_{suffix}", f"runs_step_{suffix}"} & _partitions()
    assert not Run.objects.filter(pk__in=gone).exists()
    assert not Event.objects.filter(run_id__in=gone).exists()
    # the runs that may not go were moved aside first, whole, and still verify
    for run in Run.objects.filter(pk__in=in_review + on_hold):
        assert _partition_of_events(run.pk) == {"runs_event_keep"}
        assert Step.objects.filter(run=run).count() == 3
        assert run_chain_breaks(run) == []
    assert Event.objects.filter(run_id__in=in_review + on_hold).count() == kept_events
    # the recent month is untouched
    assert {str(e.pk): e.hash for e in Event.objects.filter(run_id__in=recent)} == recent_events
    assert Run.objects.filter(pk__in=recent).count() == 3
    tombstones = AuditEntry.objects.filter(action="retention.purge")
    assert {r["id"] for t in tombstones for r in t.details["runs"]} == {str(i) for i in gone}


def _approved(run_ids: list[Any]) -> list[int]:
    """Each run's first step held for approval, with one person's approval: rows that reference
    the step in its month's partition (runs 0015's foreign key); the requests' ids."""
    ids = []
    for step in Step.objects.filter(run_id__in=run_ids, index=0):
        request = ApprovalRequest.objects.create(
            run_id=step.run_id,
            journal_month=step.journal_month,
            step=step,
            arguments_hash=step.arguments_hash,
            approvals_required=2,
            requested_at=step.intent_at,
        )
        Approval.objects.create(run_id=step.run_id, request=request, by="ana", at=step.intent_at)
        ids.append(request.pk)
    return ids


def test_a_month_with_approvals_is_dropped_and_the_kept_runs_keep_theirs(db: Any) -> None:
    """PostgreSQL refuses to detach a partition whose steps an approval request references:
    the purged runs' requests go first, the kept runs' step aside and come back unchanged."""
    RetentionPolicy.objects.create(pk=1, enabled=True, keep_days=200)
    old = _created(days_ago=300)
    gone = runs_bulk_create(runs=2, steps_per_run=2, status="completed", created_at=old)
    on_hold = runs_bulk_create(runs=2, steps_per_run=2, status="completed", created_at=old)
    Run.objects.filter(pk__in=on_hold).update(legal_hold=True)
    _approved(gone)
    kept_requests = _approved(on_hold)
    before = {
        r.pk: (r.step_id, r.run_id, r.journal_month, [(a.pk, a.by) for a in r.approvals.all()])
        for r in ApprovalRequest.objects.filter(pk__in=kept_requests)
    }

    result = retention_purge()

    assert result.purged == 2 and result.kept == 2 and len(result.months_dropped) == 1
    assert not ApprovalRequest.objects.filter(run_id__in=gone).exists()
    assert not Approval.objects.filter(run_id__in=gone).exists()
    after = {
        r.pk: (r.step_id, r.run_id, r.journal_month, [(a.pk, a.by) for a in r.approvals.all()])
        for r in ApprovalRequest.objects.filter(run_id__in=on_hold)
    }
    assert after == before
    for run_id in on_hold:  # the request's step, found through the keep partition
        assert Step.objects.get(run_id=run_id, index=0).approval_request is not None
        assert run_chain_breaks(Run.objects.get(pk=run_id)) == []

    # once its hold is lifted, a kept run goes row by row, its approval rows first
    Run.objects.filter(pk=on_hold[0]).update(legal_hold=False)
    assert retention_purge().purged == 1
    assert list(Run.objects.values_list("pk", flat=True)) == [on_hold[1]]
    assert set(ApprovalRequest.objects.values_list("run_id", flat=True)) == {on_hold[1]}
    assert set(Approval.objects.values_list("run_id", flat=True)) == {on_hold[1]}


def test_a_run_moved_aside_goes_row_by_row_once_it_may(db: Any) -> None:
    RetentionPolicy.objects.create(pk=1, enabled=True, keep_days=200)
    on_hold = runs_bulk_create(runs=2, steps_per_run=2, created_at=_created(days_ago=300))
    Run.objects.filter(pk__in=on_hold).update(legal_hold=True)
    first = retention_purge()
    assert first.purged == 0 and first.kept == 2 and len(first.months_dropped) == 1
    assert Run.objects.filter(pk__in=on_hold).count() == 2

    Run.objects.filter(pk=on_hold[0]).update(legal_hold=False)  # the hold is lifted
    second = retention_purge()

    assert second.purged == 1 and second.months_dropped == ()
    assert list(Run.objects.values_list("pk", flat=True)) == [on_hold[1]]
    assert not Event.objects.filter(run_id=on_hold[0]).exists()
    assert run_chain_breaks(Run.objects.get(pk=on_hold[1])) == []


def test_the_retention_floor_refuses_a_shorter_policy_and_says_why(
    client_for: Callable[[str], Client],
) -> None:
    admin = client_for("admins")
    page = admin.get("/audit/retention/").content.decode()
    assert "Retention floor: 183 days." in page and "AUDIT_MIN_RETENTION_DAYS" in page

    refused = admin.post("/audit/retention/", {"enabled": "on", "keep_days": "90"})

    assert refused.status_code == 400
    assert "AUDIT_MIN_RETENTION_DAYS is 183" in refused.content.decode()
    assert RetentionPolicy.objects.get().keep_days == 365  # the default, unchanged
    assert not AuditEntry.objects.filter(action="retention.update").exists()
    assert admin.post("/audit/retention/", {"keep_days": "183"}).status_code == 302


def test_no_purge_takes_a_run_younger_than_the_floor(db: Any, settings: Any) -> None:
    """A policy saved under a lower floor (or a row edited by hand) still cannot purge younger
    runs: the purge itself holds the floor, whoever starts it."""
    RetentionPolicy.objects.create(pk=1, enabled=True, keep_days=30)
    young = runs_bulk_create(runs=3, steps_per_run=1, created_at=_created(days_ago=150))
    old = runs_bulk_create(runs=2, steps_per_run=1, created_at=_created(days_ago=250))

    result = retention_purge()

    assert result.purged == 2 and not result.refused
    assert set(Run.objects.values_list("pk", flat=True)) == set(young)
    assert not Run.objects.filter(pk__in=old).exists()
    # the operator may raise the floor: then nothing of these is young enough to go
    settings.AUDIT_MIN_RETENTION_DAYS = 400
    runs_bulk_create(runs=1, steps_per_run=1, created_at=_created(days_ago=300))
    assert retention_purge().purged == 0


def test_an_open_incident_holds_its_runs_until_it_is_closed(
    db: Any, user_in: Callable[[str], Any]
) -> None:
    from audit.incidents import incident_open, incident_update

    RetentionPolicy.objects.create(pk=1, enabled=True, keep_days=200)
    ids = runs_bulk_create(runs=3, steps_per_run=1, created_at=_created(days_ago=300))
    incident = incident_open(
        user=user_in("auditors"),
        run_ids=[ids[0]],
        title="Wrong refund",
        severity="serious",
        aware_at=timezone.now(),
    )

    assert retention_purge().purged == 2
    assert list(Run.objects.values_list("pk", flat=True)) == [ids[0]]
    incident_update(user=user_in("admins"), incident_id=incident.pk, status="reported")
    assert retention_purge().purged == 0  # reported is not closed: still held
    incident_update(user=user_in("admins"), incident_id=incident.pk, status="closed")
    assert retention_purge().purged == 1
