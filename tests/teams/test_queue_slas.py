"""Each team's queue SLA and escalation address: two teams with different SLAs escalate
different items, and each mail goes only to the item's own team's address."""

from datetime import timedelta

import pytest
from django.core import mail
from django.test import Client

from dashboard.audit import AuditEntry
from review.models import Escalation
from review.services.escalations import review_items_escalate
from runs import clock
from runs.models import Step
from teams.models import Team
from teams.scope import team_scope
from tests.teams.test_switch_and_roles import item_in, person

pytestmark = pytest.mark.django_db


def waited(item: object, minutes: int) -> None:
    Step.objects.filter(run_id=item.run_id, index=2).update(  # type: ignore[attr-defined]
        intent_at=clock.now() - timedelta(minutes=minutes)
    )


def test_two_teams_slas_escalate_different_items_each_to_its_own_address(settings: object) -> None:
    from teams.services import team_create

    settings.REVIEW_SLA_SECONDS = 60 * 60  # type: ignore[attr-defined]
    billing = team_create(slug="billing", name="Billing", actor="tests")
    returns = team_create(slug="returns", name="Returns", actor="tests")
    _, ada = person("ada", billing="admin")
    ada.post("/team/settings", {"review_sla_minutes": 5, "escalation_email": "billing@example.com"})
    billing.refresh_from_db()
    assert (billing.review_sla_minutes, billing.escalation_email) == (5, "billing@example.com")
    with team_scope(billing.pk):
        assert AuditEntry.objects.get(action="team.settings").details["after"] == {
            "review_sla_minutes": 5,
            "escalation_email": "billing@example.com",
        }
    Team.objects.filter(pk=returns.pk).update(review_sla_minutes=30)
    kim, _ = person("kim", returns="supervisor")
    kim.email = "kim@example.com"
    kim.save()

    bill, ret = item_in(billing), item_in(returns)
    waited(bill, 10)  # over billing's 5 minutes
    waited(ret, 10)  # within returns' 30
    assert review_items_escalate() == 1
    assert [m.to for m in mail.outbox] == [["billing@example.com"]]
    assert "5-minute SLA" in mail.outbox[0].body
    assert Escalation.objects.get().run_id == bill.step.run_id

    waited(ret, 45)  # now over returns' 30: its supervisor, not billing's address
    assert review_items_escalate() == 1
    assert mail.outbox[1].to == ["kim@example.com"]
    assert ret.run_id in mail.outbox[1].body


def test_the_queue_colours_each_item_by_its_own_teams_sla() -> None:
    from teams.services import team_create

    billing = team_create(slug="billing", name="Billing", actor="tests")
    returns = team_create(slug="returns", name="Returns", actor="tests")
    Team.objects.filter(pk=billing.pk).update(review_sla_minutes=5)
    Team.objects.filter(pk=returns.pk).update(review_sla_minutes=600)
    bill, ret = item_in(billing), item_in(returns)
    waited(bill, 20)
    waited(ret, 20)
    _, bea = person("bea", billing="supervisor", returns="supervisor")
    page = bea.get("/queue/").content.decode()

    def level(item: object) -> str:
        row = page.split(f'data-step="{item.run_id}#2"')[0].rsplit("<tr", 1)[1]  # type: ignore[attr-defined]
        return row.split('class="sla-')[1].split('"')[0]

    assert level(bill) != level(ret)


def test_the_settings_page_is_for_the_switched_teams_admins() -> None:
    from teams.services import team_create

    team_create(slug="billing", name="Billing", actor="tests")
    team_create(slug="returns", name="Returns", actor="tests")
    _, ada = person("ada", billing="admin", returns="admin")
    assert "choose the team in the header" in ada.get("/team/settings").content.decode()
    ada.post("/team/", {"team": "returns"})
    assert 'data-team="returns"' in ada.get("/team/settings").content.decode()
    _, sam = person("sam", billing="supervisor")
    assert sam.get("/team/settings").status_code == 403
    assert isinstance(sam, Client)
