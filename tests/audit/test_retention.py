"""Retention purges old finished runs, after a signed checkpoint, leaving a tombstone."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import connection
from django.test import Client
from django.utils import timezone

from audit.models import Checkpoint, CheckpointLeaf, RetentionPolicy
from audit.retention import retention_purge
from bench.testdata import runs_bulk_create
from review.audit import AuditEntry
from runs.models import Event, Run, Step


def _age(ids: list[Any], days: int) -> None:
    Run.objects.filter(pk__in=ids).update(finished_at=timezone.now() - timedelta(days=days))


def test_old_finished_runs_are_purged_after_a_checkpoint_and_leave_a_tombstone(db: Any) -> None:
    RetentionPolicy.objects.create(pk=1, enabled=True, keep_days=30)
    old_done = runs_bulk_create(runs=4, steps_per_run=2, status="completed")
    old_failed = runs_bulk_create(runs=2, steps_per_run=1, status="failed")
    recent = runs_bulk_create(runs=3, steps_per_run=1, status="completed")
    in_review = runs_bulk_create(runs=2, steps_per_run=1, status="needs_review")
    live = runs_bulk_create(runs=2, steps_per_run=1, status="running")
    over_budget = runs_bulk_create(runs=1, steps_per_run=1, status="budget_exceeded")
    _age(old_done + old_failed + in_review + live + over_budget, days=90)
    _age(recent, days=3)
    heads = {str(r.pk): r.event_head for r in Run.objects.filter(pk__in=old_done + old_failed)}

    result = retention_purge()

    assert result.purged == 6 and not result.refused
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
    _age(runs_bulk_create(runs=2, steps_per_run=1), days=900)
    result = retention_purge()
    assert result.purged == 0 and "disabled" in result.refused
    assert Run.objects.count() == 2 and not Checkpoint.objects.exists()


def test_a_broken_chain_stops_the_purge(db: Any) -> None:
    RetentionPolicy.objects.create(pk=1, enabled=True, keep_days=1)
    ids = runs_bulk_create(runs=3, steps_per_run=1)
    _age(ids, days=10)
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(
            "UPDATE runs_event SET actor = 'mallory' WHERE run_id = %s AND seq = 2", [ids[1]]
        )
        cursor.execute("SET session_replication_role = DEFAULT")
    result = retention_purge()
    assert result.purged == 0 and "no signed checkpoint" in result.refused
    assert Run.objects.count() == 3
    assert not AuditEntry.objects.filter(action="retention.purge").exists()


def test_only_admins_set_the_policy_and_it_is_audited(client_for: Callable[[str], Client]) -> None:
    assert client_for("auditors").get("/audit/retention/").status_code == 403
    admin = client_for("admins")
    assert admin.get("/audit/retention/").status_code == 200
    assert admin.post("/audit/retention/", {"keep_days": "0"}).status_code == 400
    response = admin.post("/audit/retention/", {"enabled": "on", "keep_days": "45"})
    assert response.status_code == 302
    policy = RetentionPolicy.objects.get()
    assert policy.enabled and policy.keep_days == 45 and policy.updated_by == "admins-user"
    entry = AuditEntry.objects.get(action="retention.update")
    assert entry.details["to"] == {"enabled": True, "keep_days": 45}

    _age(runs_bulk_create(runs=2, steps_per_run=1), days=60)
    admin.post("/audit/retention/", {"purge": "1"})
    assert Run.objects.count() == 0
    assert AuditEntry.objects.get(action="retention.purge").actor_name == "admins-user"
