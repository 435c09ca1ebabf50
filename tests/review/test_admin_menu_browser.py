"""An admin finds every setting in the menu (approval rules and notifications too), and a page's
buttons are buttons, not headings: "New policy" is the size of the text around it. A new default
policy is warned about, and asked about, before it replaces the old one."""

from typing import Any

import pytest

from dashboard.roles import ADMINS
from runs.models import BudgetPolicy
from tests.review.browser import shot, signed_in
from tests.review.factories import user_in

pytestmark = pytest.mark.django_db(transaction=True)


def font_px(locator: Any) -> float:
    return float(locator.evaluate("e => parseFloat(getComputedStyle(e).fontSize)"))


def test_settings_are_in_the_menu_and_buttons_are_not_heading_sized(
    browser: Any, review_server: str
) -> None:
    user_in(ADMINS, "ada")
    page = signed_in(browser, review_server, "ada")
    for name, heading in (("Approval rules", "Approval rules"), ("Notifications", "Notifications")):
        page.click(f"nav >> text={name}")
        page.locator("h1", has_text=heading).wait_for()
        assert page.locator("nav a[aria-current=page]").inner_text() == name

    page.click("nav >> text=Budget policies")
    new_policy = page.locator("a.button", has_text="New policy")
    body = font_px(page.locator("main p.muted").first)
    assert font_px(new_policy) <= body + 2 < font_px(page.locator("h1"))
    assert page.locator("h1 a.button").count() == 0
    shot(page, "policies-menu")
    page.click("nav >> text=Approval rules")
    assert page.locator("h1 a.button").count() == 0
    assert font_px(page.locator("a.button", has_text="New rule")) < font_px(page.locator("h1"))

    # a new default: warned before, asked at saving, replaced only once confirmed
    old = BudgetPolicy.objects.get(is_default=True)
    page.click("nav >> text=Budget policies")
    page.click("text=New policy")
    warning = page.locator("#default-now")
    assert "message warning" in str(warning.get_attribute("class"))
    assert f"The default policy now is “{old.name}”" in warning.inner_text()
    page.fill("input[name=name]", "strict")
    page.check("input[name=is_default]")
    for field, value in (("max_steps", "10"), ("max_tokens", "1000"), ("max_wall_seconds", "600")):
        page.fill(f"input[name={field}]", value)
    page.fill("input[name=max_recoveries]", "1")
    page.click("main button[type=submit]")
    page.locator(".errors", has_text="Tick “Replace the default” to confirm.").wait_for()
    shot(page, "policy-new-default-asked")
    assert BudgetPolicy.objects.get(is_default=True).pk == old.pk
    page.check("input[name=replace_default]")
    page.click("main button[type=submit]")
    page.wait_for_url(f"{review_server}/policies/")
    assert BudgetPolicy.objects.get(is_default=True).name == "strict"
