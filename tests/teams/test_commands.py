"""An operator makes a team, its token and its people from the command line; each change is an
audit entry in the team, and the token's runs are the team's."""

import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from review.models import AuditEntry
from runs.models import BudgetPolicy, Run, WorkerToken
from teams.backends import role_permissions
from teams.models import DEFAULT_TEAM_SLUG, Membership, Team
from teams.scope import every_team, team_scope


def command(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue().strip()


def test_a_team_its_token_and_its_supervisor_from_the_command_line(db: Any) -> None:
    assert (
        command("create_team", "billing", "--name", "Billing")
        == "Created team 'billing' (Billing)."
    )
    billing = Team.objects.get(slug="billing")
    assert BudgetPolicy.objects.filter(is_default=True, team=billing).exists()  # runs can start
    assert AuditEntry.objects.get(action="team.create").team_id == billing.pk

    raw = command("create_worker_token", "billing-worker", "--team", "billing").splitlines()[-1]
    token = WorkerToken.objects.get(name="billing-worker")
    assert token.team_id == billing.pk
    assert AuditEntry.objects.get(action="token.create", team=billing).target == f"token:{token.pk}"

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    created = api.post("/api/v1/runs/", {"agent": "invoices", "input": {}}, format="json")
    assert created.status_code == 201
    assert Run.objects.get(pk=created.json()["id"]).team_id == billing.pk

    User.objects.create_user(username="bea")
    assert (
        command("grant_team_role", "bea", "billing", "supervisor")
        == "bea is supervisor in billing."
    )
    assert Membership.objects.filter(user__username="bea", team=billing, role="supervisor").exists()
    grant = AuditEntry.objects.get(action="team.role_grant", team=billing)
    assert grant.details == {"username": "bea", "team": billing.pk, "role": "supervisor"}


def test_a_token_without_a_team_is_defaults_as_before(db: Any) -> None:
    command("create_worker_token", "old-style")
    assert WorkerToken.objects.get(name="old-style").team.slug == DEFAULT_TEAM_SLUG


def test_names_are_unique_per_team_and_unknown_teams_are_refused(db: Any) -> None:
    command("create_team", "returns")
    command("create_worker_token", "worker", "--team", "returns")
    command("create_worker_token", "worker")  # the same name in another team
    with every_team("tests"):
        assert WorkerToken.objects.filter(name="worker").count() == 2
    with pytest.raises(CommandError, match="in use"):
        command("create_worker_token", "worker", "--team", "returns")
    with pytest.raises(CommandError, match="No team 'nope'"):
        command("create_worker_token", "w", "--team", "nope")
    with pytest.raises(CommandError, match="exists already"):
        command("create_team", "returns")
    with pytest.raises(CommandError):
        command("create_team", "Not A Slug")


def test_a_role_gives_its_permissions_in_its_team_only(db: Any) -> None:
    command("create_team", "billing")
    command("create_team", "returns")
    billing, returns = Team.objects.get(slug="billing"), Team.objects.get(slug="returns")
    ada = User.objects.create_user(username="ada")
    command("grant_team_role", "ada", "billing", "supervisor")
    ada = User.objects.get(pk=ada.pk)
    with team_scope(billing.pk):
        assert ada.has_perm("review.resolve")
    with team_scope(returns.pk):
        assert not User.objects.get(pk=ada.pk).has_perm("review.resolve")
    in_returns = Run(team_id=returns.pk)
    in_billing = Run(team_id=billing.pk)
    assert ada.has_perm("review.resolve", in_billing) and not ada.has_perm(
        "review.resolve", in_returns
    )
    assert "review.manage_tokens" not in role_permissions(["supervisor"])
