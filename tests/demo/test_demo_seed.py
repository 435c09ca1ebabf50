"""`manage.py demo_seed` registers the worker token `python -m demo.embedded start` chose: the
demo's Celery worker starts with it while the database is still migrating, so the seed must
not replace it with one of its own."""

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from dashboard.audit import AuditEntry
from runs.models import WorkerToken
from runs.tokens import worker_token_revoke

pytestmark = pytest.mark.django_db


def _seed(state: Path) -> str:
    out = io.StringIO()
    call_command("demo_seed", state=state, stdout=out)
    return out.getvalue()


def _worker_may_list_runs(raw: str) -> bool:
    response = Client().get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    return response.status_code == 200


def test_the_seed_registers_the_token_the_worker_was_started_with(tmp_path: Path) -> None:
    chosen = "alw_chosen-before-the-database-existed-0123456789"
    (tmp_path / "worker-token").write_text(chosen + "\n")
    assert not _worker_may_list_runs(chosen)

    _seed(tmp_path)

    assert (tmp_path / "worker-token").read_text().strip() == chosen
    assert _worker_may_list_runs(chosen)
    _seed(tmp_path)  # a second start changes nothing
    assert WorkerToken.objects.filter(name="demo-workers").count() == 1


def test_a_revoked_demo_token_is_replaced_and_said_so(tmp_path: Path) -> None:
    chosen = "alw_revoked-later-0123456789abcdefghijklmnopqrstu"
    (tmp_path / "worker-token").write_text(chosen + "\n")
    _seed(tmp_path)
    worker_token_revoke(token_id=WorkerToken.objects.get(name="demo-workers").pk)

    said = _seed(tmp_path)

    new = (tmp_path / "worker-token").read_text().strip()
    assert new != chosen
    assert _worker_may_list_runs(new) and not _worker_may_list_runs(chosen)
    assert "was revoked" in said


def test_the_seeds_policies_are_audited_as_the_seeds_not_the_admins(tmp_path: Path) -> None:
    _seed(tmp_path)

    entries = AuditEntry.objects.filter(action="policy.create")
    assert entries.count() == 2  # support and research
    assert {e.actor_name for e in entries} == {"system:demo_seed"}
    assert all(e.actor is None for e in entries)
