"""The team switch in a real browser (Debian Chromium via Playwright, a live server): a person in
two teams works in one, sees only its queue, then all their teams with a badge on each item."""

from typing import Any

import pytest

from teams.scope import team_scope
from teams.services import team_create
from tests.review.browser import shot, signed_in
from tests.review.factories import killed_support_run
from tests.teams.test_switch_and_roles import person

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_person_in_two_teams_switches_between_one_queue_and_both(
    browser: Any, review_server: str
) -> None:
    base = review_server
    billing = team_create(slug="billing", name="Billing", actor="tests")
    returns = team_create(slug="returns", name="Returns", actor="tests")
    with team_scope(billing.pk):
        bill = killed_support_run(external_id="bill-1")
    with team_scope(returns.pk):
        ret = killed_support_run(external_id="ret-1")
    person("bea", billing="supervisor", returns="supervisor")
    page = signed_in(browser, base, "bea")
    page.goto(f"{base}/queue/")
    both = {bill.run_id: "billing", ret.run_id: "returns"}
    for run_id, slug in both.items():
        row = page.locator(f'tr[data-step="{run_id}#2"]')
        assert row.locator(f'.badge.team[data-team="{slug}"]').count() == 1

    page.select_option("#team-switch select", "billing")
    page.click("#team-switch button")
    page.wait_for_url(f"{base}/queue/")
    page.locator(f'tr[data-step="{ret.run_id}#2"]').wait_for(state="detached")
    assert page.locator(f'tr[data-step="{bill.run_id}#2"]').count() == 1
    assert page.locator(".badge.team").count() == 0
    assert page.locator("#team-switch select").input_value() == "billing"
    shot(page, "team-switch-one-team")

    page.select_option("#team-switch select", "all")
    page.click("#team-switch button")
    page.locator(f'tr[data-step="{ret.run_id}#2"]').wait_for()
    for run_id, slug in both.items():
        row = page.locator(f'tr[data-step="{run_id}#2"]')
        assert row.locator(f'.badge.team[data-team="{slug}"]').count() == 1
    shot(page, "team-switch-all-teams")
