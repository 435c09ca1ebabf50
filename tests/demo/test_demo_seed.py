"""`manage.py demo_seed` registers the worker token `python -m demo.embedded start` chose: the
demo's Celery worker starts with it while the database is still migrating, so the seed must
not replace it with one of its own."""

import io
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from dashboard.audit import AuditEntry
from runs.models import BudgetPolicy, WorkerToken
from runs.tokens import worker_token_revoke
from teams.models import Membership, Team, default_team

pytestmark = pytest.mark.django_db

DEMO_USERS = ("supervisor", "admin", "auditor", "support-sup", "billing-sup")


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
    assert entries.count() == 4  # support and research, in each of the demo's two teams
    assert sorted(entries.values_list("team__slug", flat=True)) == [
        "billing",
        "billing",
        "default",
        "default",
    ]
    assert {e.actor_name for e in entries} == {"system:demo_seed"}
    assert all(e.actor is None for e in entries)


def test_the_demo_has_two_teams_with_a_supervisor_of_each(tmp_path: Path) -> None:
    said = _seed(tmp_path)

    billing = Team.objects.get(slug="billing")
    support = default_team()
    assert support.name == "Support"
    roles = {
        (m.user.username, m.team.slug, m.role)
        for m in Membership.objects.filter(user__username__in=DEMO_USERS)
    }
    assert roles == {
        ("supervisor", "default", "supervisor"),
        ("support-sup", "default", "supervisor"),
        ("billing-sup", "billing", "supervisor"),
        ("admin", "default", "admin"),
        ("admin", "billing", "admin"),
        ("auditor", "default", "auditor"),
        ("auditor", "billing", "auditor"),
    }
    for name in DEMO_USERS:
        assert re.search(rf"^    {name} +\S+ ", said, re.MULTILINE), said
    credentials = (tmp_path / "credentials.txt").read_text()
    assert "billing-sup\t" in credentials and "(supervisor in billing)" in credentials
    # billing's agents have their own token, and billing its own budget policies
    assert WorkerToken.objects.filter(team=billing).count() == 1
    assert set(BudgetPolicy.objects.filter(team=billing).values_list("agent", flat=True)) >= {
        "support",
        "research",
    }
    again = _seed(tmp_path)  # a second start changes nothing
    assert "passwords in .demo/credentials.txt" in again
    assert Membership.objects.filter(user__username__in=DEMO_USERS).count() == 7
    assert AuditEntry.objects.filter(action="team.rename").count() == 1
    assert support.pk != billing.pk
