"""The people page as an admin sees it: a superuser is said to be one (their groups do not limit
them), and every group checkbox sits beside its name, not above it."""

from typing import Any

import pytest
from django.contrib.auth.models import User

from dashboard.roles import ADMINS, SUPERVISORS
from tests.review.browser import shot, signed_in
from tests.review.factories import user_in

pytestmark = pytest.mark.django_db(transaction=True)


def beside(box: Any, label: Any) -> bool:
    """The checkbox is left of its label's text, on the same line."""
    b, t = box.bounding_box(), label.bounding_box()
    middle = b["y"] + b["height"] / 2
    return (
        t["y"] <= middle <= t["y"] + t["height"]
        and b["x"] + b["width"] <= t["x"] + t["width"]
        and t["height"] < 3 * b["height"]
    )


def test_the_people_page_names_a_superuser_and_puts_each_checkbox_beside_its_group(
    browser: Any, review_server: str
) -> None:
    user_in(ADMINS, "ada")
    user_in(SUPERVISORS, "sam")
    User.objects.create_superuser("root", "root@example.com", "a long passphrase 1")
    page = signed_in(browser, review_server, "ada")
    page.goto(f"{review_server}/people/")
    shot(page, "people")

    root = page.locator('tr[data-user="root"]')
    assert root.locator(".superuser").inner_text() == "superuser"
    assert "every permission, whatever the groups" in root.inner_text()
    assert page.locator('tr[data-user="sam"] .superuser').count() == 0

    labels = page.locator('tr[data-user="sam"] td.groups label')
    assert labels.count() == 3
    for n in range(labels.count()):
        label = labels.nth(n)
        assert beside(label.locator("input"), label), label.inner_text()
    new_user = page.locator("#new-local-user label:has(input[type=checkbox])")
    assert new_user.count() == 3
    for n in range(new_user.count()):
        label = new_user.nth(n)
        assert beside(label.locator("input"), label), label.inner_text()
