"""OIDC_ROLE_MAP values that name a team: each sign-in sets the person's roles in every team
exactly as mapped, audited in that team; a value without a team keeps meaning `default`."""

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from dashboard.audit import AuditEntry
from dashboard.roles import SUPERVISORS
from sso.checks import sso_role_map_teams_check
from sso.conf import role_map_parse
from sso.services import SsoRefused, sso_sign_in
from teams.models import Team, default_team
from teams.scope import team_scope
from teams.services import roles_of, team_create
from tests.sso.test_sso_sign_in import ISSUER, claims, conf, groups_of

pytestmark = pytest.mark.django_db

MAP = (
    "ledger-sup=supervisors,"
    "ledger-billing-sup=billing:supervisor,"
    "ledger-billing-audit=billing:auditor,"
    "ledger-returns-admin=returns:admin,"
    "ledger-future=support:supervisor"
)


def sign_in(*values: str) -> Any:
    return sso_sign_in(
        conf=conf(role_map=role_map_parse(MAP)), issuer=ISSUER, claims=claims("u-7", *values)
    )


def by_slug(user: Any) -> dict[str, set[str]]:
    slugs = dict(Team.objects.values_list("pk", "slug"))
    return {slugs[team]: set(roles) for team, roles in roles_of(user).items()}


@pytest.fixture
def teams(groups: Any) -> tuple[Team, Team]:
    return (
        team_create(slug="billing", name="Billing", actor="tests"),
        team_create(slug="returns", name="Returns", actor="tests"),
    )


def test_each_sign_in_sets_the_roles_per_team_exactly_as_mapped(teams: Any) -> None:
    billing, returns = teams
    first = sign_in("ledger-sup", "ledger-billing-sup", "ledger-returns-admin")
    user = first.user
    assert by_slug(user) == {
        "default": {"supervisor"},
        "billing": {"supervisor"},
        "returns": {"admin"},
    }
    assert groups_of(user) == {SUPERVISORS}  # the groups stand for default's roles only
    with team_scope(billing.pk):
        entry = AuditEntry.objects.get(action="sso.roles", details__team="billing")
    assert entry.team_id == billing.pk and entry.details["added"] == ["supervisor"]

    # the provider moved them: auditor in billing, nothing in returns, nothing in default
    again = sign_in("ledger-billing-audit")
    assert by_slug(again.user) == {"billing": {"auditor"}}
    with team_scope(returns.pk):
        revoked = AuditEntry.objects.get(action="sso.roles", details__removed=["admin"])
    assert revoked.team_id == returns.pk
    login = AuditEntry.objects.filter(action="sso.login").order_by("-at").first()
    assert login is not None and login.details["team_roles"] == {"billing": ["auditor"]}


def test_a_role_only_in_another_team_lets_the_person_in(teams: Any) -> None:
    done = sign_in("ledger-returns-admin")
    assert done.created and by_slug(done.user) == {"returns": {"admin"}}
    assert default_team().pk not in roles_of(done.user)


def test_a_team_the_map_names_before_it_exists_grants_nothing_and_is_named(teams: Any) -> None:
    with pytest.raises(SsoRefused):
        sign_in("ledger-future")  # `support` does not exist: no role, no entry
    done = sign_in("ledger-sup", "ledger-future")
    assert by_slug(done.user) == {"default": {"supervisor"}}
    login = AuditEntry.objects.filter(action="sso.login").get()
    assert login.details["unknown_teams"] == ["support"]
    team_create(slug="support", actor="tests")
    assert by_slug(sign_in("ledger-future").user) == {"support": {"supervisor"}}


def test_the_start_up_check_warns_of_a_team_the_map_names_that_does_not_exist(
    teams: Any, settings: Any
) -> None:
    settings.OIDC_ISSUER = ISSUER
    settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET = "c", "s"
    settings.OIDC_ROLE_MAP = MAP
    [warning] = sso_role_map_teams_check()
    assert warning.id == "sso.W002" and "support" in warning.msg and "billing" not in warning.msg
    team_create(slug="support", actor="tests")
    assert sso_role_map_teams_check() == []
    settings.OIDC_ROLE_MAP = "x=Not A Team:admin"
    with pytest.raises(SystemCheckError, match="not a team slug"):
        call_command("check")
