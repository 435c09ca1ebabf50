"""A person in several teams: the header's switch, the pages that list runs with every team in
sight, new rows filed in the switched team, and each action checked in the object's own team
(a supervisor of billing who audits returns decides billing's items, never returns')."""

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from dashboard.audit import AuditEntry
from runs.constants import StepState
from runs.models import BudgetPolicy, Run, Step, WorkerToken
from teams.models import Team, default_team
from teams.scope import team_scope
from teams.services import grant_role, team_create
from tests.review.factories import PASSWORD, groups_ready, killed_support_run

pytestmark = pytest.mark.django_db


def person(username: str, **roles: str) -> tuple[User, Client]:
    """`roles`: team slug → role. A signed-in client for them."""
    groups_ready()
    user = User.objects.create_user(username=username, password=PASSWORD)
    for slug, role in roles.items():
        grant_role(user, Team.objects.get(slug=slug), role, actor="tests")
    client = Client()
    client.force_login(user)
    return user, client


def item_in(team: Team, **kwargs: Any) -> Any:
    with team_scope(team.pk):
        return killed_support_run(**kwargs)


@pytest.fixture
def billing() -> Team:
    return team_create(slug="billing", name="Billing", actor="tests")


@pytest.fixture
def returns() -> Team:
    return team_create(slug="returns", name="Returns", actor="tests")


def switch(client: Client, slug: str, follow: bool = False) -> Any:
    return client.post("/team/", {"team": slug, "next": "/queue/"}, follow=follow)


def test_an_install_with_one_team_shows_no_switch_and_no_team_badge() -> None:
    item_in(default_team(), external_id="only-team")
    _, sam = person("sam", default="supervisor")
    for page in ("/queue/", "/", "/console/"):
        body = sam.get(page).content.decode()
        assert 'id="team-switch"' not in body, page
        assert 'class="badge team"' not in body, page


def test_the_switch_shows_one_team_and_all_my_teams_shows_both_with_badges(
    billing: Team, returns: Team
) -> None:
    bill, ret = item_in(billing, external_id="bill-1"), item_in(returns, external_id="ret-1")
    _, bea = person("bea", billing="supervisor", returns="auditor")
    both = bea.get("/queue/").content.decode()
    assert 'id="team-switch"' in both and "all my teams" in both
    assert bill.run_id in both and ret.run_id in both
    assert 'data-team="billing"' in both and 'data-team="returns"' in both

    assert switch(bea, "returns").url == "/queue/"
    only = bea.get("/queue/").content.decode()
    assert ret.run_id in only and bill.run_id not in only
    assert 'class="badge team"' not in only  # one team in sight: no badges
    runs = bea.get("/").content.decode()
    assert "ret-1" in runs and "bill-1" not in runs
    # the other team's run is as if it did not exist while switched away
    assert bea.get(f"/runs/{bill.run_id}/").status_code == 404

    switch(bea, "all")
    runs = bea.get("/").content.decode()
    assert "ret-1" in runs and "bill-1" in runs
    overview = bea.get("/console/").content.decode()
    assert 'id="overview-teams"' in overview


def test_nobody_switches_to_a_team_they_hold_no_role_in(billing: Team, returns: Team) -> None:
    item_in(returns, external_id="ret-secret")
    _, bea = person("bea", billing="supervisor", default="supervisor")
    assert switch(bea, "returns").status_code == 404
    assert switch(bea, "no-such-team").status_code == 404
    assert "ret-secret" not in bea.get("/").content.decode()
    # the switch offers only their own teams
    page = bea.get("/queue/").content.decode()
    assert 'value="billing"' in page and 'value="returns"' not in page


def test_all_my_teams_never_reaches_beyond_them(billing: Team, returns: Team) -> None:
    secret = item_in(returns, external_id="ret-secret")
    item_in(billing, external_id="bill-1")
    _, bea = person("bea", billing="supervisor", default="auditor")
    assert "ret-secret" not in bea.get("/").content.decode()
    assert secret.run_id not in bea.get("/queue/").content.decode()
    assert bea.get(f"/queue/{secret.run_id}/2/").status_code == 404
    assert bea.post(f"/queue/{secret.run_id}/2/claim").status_code == 404


# -- actions checked in the object's team: supervisor in billing, auditor in returns ----------

ACTIONS = {
    "claim": lambda item: (f"/queue/{item.run_id}/2/claim", {}),
    "resolve": lambda item: (
        f"/queue/{item.run_id}/2/resolve",
        {"action": "abandon", "note": "not sent"},
    ),
    "cancel": lambda item: (f"/console/runs/{item.run_id}/cancel", {"note": "stop"}),
}


@pytest.mark.parametrize(
    ("roles", "team", "action", "status"),
    [
        # role in the item's team, the item's team, the action, the answer
        ({"billing": "supervisor", "returns": "auditor"}, "billing", "claim", 302),
        ({"billing": "supervisor", "returns": "auditor"}, "returns", "claim", 403),
        ({"billing": "supervisor", "returns": "auditor"}, "billing", "resolve", 302),
        ({"billing": "supervisor", "returns": "auditor"}, "returns", "resolve", 403),
        ({"billing": "admin", "returns": "supervisor"}, "billing", "cancel", 302),
        ({"billing": "admin", "returns": "supervisor"}, "returns", "cancel", 403),
        ({"billing": "supervisor"}, "returns", "claim", 404),
        ({"billing": "supervisor"}, "returns", "resolve", 404),
        ({"billing": "admin"}, "returns", "cancel", 404),
    ],
)
def test_each_action_is_checked_in_the_objects_team(
    billing: Team, returns: Team, roles: dict[str, str], team: str, action: str, status: int
) -> None:
    item = item_in({"billing": billing, "returns": returns}[team])
    _, client = person("pat", **roles)
    url, data = ACTIONS[action](item)
    before = Step.objects.get(run_id=item.run_id, index=2)
    assert client.post(url, data).status_code == status
    after = Step.objects.get(run_id=item.run_id, index=2)
    if status != 302:  # refused: nothing changed, the refusal audited (when seen)
        assert (after.state, after.claimed_by_id) == (before.state, before.claimed_by_id)
        assert Run.objects.get(pk=item.run_id).status == "needs_review"
        if status == 403:
            assert AuditEntry.objects.filter(action="access.refused", target=url).exists()


def test_bulk_decisions_refuse_an_item_of_a_team_where_the_person_only_audits(
    billing: Team, returns: Team
) -> None:
    mine, theirs = item_in(billing), item_in(returns)
    _, bea = person("bea", billing="supervisor", returns="auditor")
    page = bea.post(
        "/queue/bulk",
        {"items": [f"{mine.run_id}#2", f"{theirs.run_id}#2"], "action": "abandon", "note": "x"},
        follow=True,
    ).content.decode()
    assert "You may not decide items" in page
    assert mine.step.state == theirs.step.state == StepState.UNKNOWN


def test_the_item_page_offers_no_decision_in_a_team_where_the_person_audits(
    billing: Team, returns: Team
) -> None:
    theirs = item_in(returns)
    _, bea = person("bea", billing="supervisor", returns="auditor")
    page = bea.get(f"/queue/{theirs.run_id}/2/").content.decode()
    assert 'action="/queue/' + theirs.run_id + '/2/resolve"' not in page


def test_settings_pages_show_only_teams_where_the_person_administers(
    billing: Team, returns: Team
) -> None:
    with team_scope(returns.pk):
        theirs = BudgetPolicy.objects.create(
            name="returns-only",
            agent="r",
            max_steps=5,
            max_tokens=9,
            max_wall_seconds=60,
            max_recoveries=1,
        )
    _, ada = person("ada", billing="admin", returns="supervisor")
    assert "returns-only" not in ada.get("/policies/").content.decode()
    assert ada.get(f"/policies/{theirs.pk}/").status_code == 404
    # with billing the only team ada administers, new rows go there without asking
    page = ada.get("/tokens/").content.decode()
    assert 'id="team-of-new"' in page and 'data-team="billing"' in page
    ada.post("/tokens/", {"name": "bill-worker"})
    assert WorkerToken.objects.get(name="bill-worker").team_id == billing.pk


def test_new_rows_go_to_the_switched_team_and_several_teams_ask_to_choose(
    billing: Team, returns: Team
) -> None:
    _, ada = person("ada", billing="admin", returns="admin")
    page = ada.get("/tokens/").content.decode()
    assert "choose one in the header" in page
    refused = ada.post("/tokens/", {"name": "which-team"})
    assert (
        refused.status_code == 400 and "choose the team in the header" in refused.content.decode()
    )
    assert not WorkerToken.objects.filter(name="which-team").exists()

    switch(ada, "returns")
    assert 'data-team="returns"' in ada.get("/tokens/").content.decode()
    ada.post("/tokens/", {"name": "ret-worker"})
    assert WorkerToken.objects.get(name="ret-worker").team_id == returns.pk
    ada.post("/notifications/", {"url": "https://returns.example/h", "secret": "s"})
    from review.models import EscalationWebhook

    assert EscalationWebhook.objects.get().team_id == returns.pk


# -- the people page by team, and the org admin's teams ----------------------------------------


def test_a_team_admin_grants_and_revokes_roles_in_their_team_only(
    billing: Team, returns: Team
) -> None:
    _, ada = person("ada", billing="admin", returns="supervisor")
    kim, _ = person("kim")  # a new account: of no team, in every team admin's sight
    page = ada.get("/people/").content.decode()
    assert 'name="team"' in page and '<option value="billing">' in page
    assert '<option value="returns">' not in page  # ada administers billing only

    ada.post(f"/people/{kim.pk}/role", {"team": "billing", "role": "supervisor"})
    assert kim.team_roles.filter(team=billing, role="supervisor").exists()
    grant = AuditEntry.objects.get(
        action="team.role_grant", details__username="kim", actor_name="ada"
    )
    assert (grant.actor_name, grant.team_id) == ("ada", billing.pk)
    page = ada.get("/people/").content.decode()
    row = page.split('data-user="kim"')[1].split("</tr>")[0]
    assert 'data-team="billing"' in row and "supervisor" in row

    assert (
        ada.post(f"/people/{kim.pk}/role", {"team": "returns", "role": "admin"}).status_code == 404
    )
    assert not kim.team_roles.filter(team=returns, role="admin").exists()

    ada.post(
        f"/people/{kim.pk}/role", {"team": "billing", "role": "supervisor", "change": "revoke"}
    )
    assert not kim.team_roles.filter(team=billing).exists()
    assert AuditEntry.objects.filter(action="team.role_revoke", details__username="kim").exists()


def test_bringing_a_person_of_other_teams_only_into_a_team_is_the_org_admins_act(
    billing: Team, returns: Team
) -> None:
    _, ada = person("ada", billing="admin")
    lee, _ = person("lee", returns="auditor")  # of returns only: out of ada's sight
    assert 'data-user="lee"' not in ada.get("/people/").content.decode()
    refused = ada.post(
        f"/people/{lee.pk}/role", {"team": "billing", "role": "supervisor"}, follow=True
    )
    assert "No such user." in refused.content.decode()  # as for a person who does not exist
    assert not lee.team_roles.filter(team=billing).exists()

    root = User.objects.create_superuser("root", password=PASSWORD)
    org = Client()
    org.force_login(root)
    org.post(f"/people/{lee.pk}/role", {"team": "billing", "role": "supervisor"})
    assert lee.team_roles.filter(team=billing, role="supervisor").exists()
    assert 'data-user="lee"' in ada.get("/people/").content.decode()


def test_a_team_admin_cannot_set_the_groups_that_stand_for_roles_in_default(
    billing: Team,
) -> None:
    _, ada = person("ada", billing="admin")
    kim, _ = person("kim", billing="supervisor")
    assert ada.post(f"/people/{kim.pk}/groups", {"groups": ["admins"]}).status_code == 403
    assert not kim.team_roles.filter(team=default_team()).exists()


def test_the_org_admin_lists_teams_with_counts_and_creates_one_audited(
    billing: Team, returns: Team
) -> None:
    item_in(billing)
    person("bea", billing="supervisor", returns="auditor")
    root = User.objects.create_superuser("root", password=PASSWORD)
    client = Client()
    client.force_login(root)
    page = client.get("/teams/").content.decode()
    row = page.split('data-team="billing"')[1].split("</tr>")[0]
    assert '<td class="people">1</td>' in row and '<td class="runs">1</td>' in row
    client.post("/teams/", {"slug": "support", "name": "Support"})
    support = Team.objects.get(slug="support")
    assert AuditEntry.objects.filter(action="team.create", team_id=support.pk).exists()
    with team_scope(support.pk):
        assert BudgetPolicy.objects.filter(is_default=True).count() == 1
    assert client.post("/teams/", {"slug": "Not A Slug"}).status_code == 400
    _, ada = person("ada", billing="admin")
    assert ada.get("/teams/").status_code == 403
