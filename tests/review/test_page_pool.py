"""The browser tests' page pool hands a page on without what the last test left in it."""

import pytest
from django.conf import settings

from dashboard.roles import SUPERVISORS
from tests.review.browser import page_pool, signed_in
from tests.review.factories import user_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_page_given_back_is_signed_out_alone_and_still_the_same_page(browser, review_server):
    user_in(SUPERVISORS, "sam")
    pool = page_pool(browser)
    page = signed_in(browser, review_server, "sam")
    page.context.new_page().goto(f"{review_server}/queue/")  # a second tab of the test's
    stray = browser.new_context()  # and a context of its own
    stray.new_page()

    pool.give_back()

    assert stray not in browser.contexts
    assert page.context.pages == [page]
    assert page.url == f"{review_server}/login/"  # polls nothing while it waits
    assert settings.SESSION_COOKIE_NAME not in {c["name"] for c in page.context.cookies()}
    again = pool.take(viewport=(390, 800))
    assert again is page
    assert again.viewport_size == {"width": 390, "height": 800}
    again.goto(f"{review_server}/queue/")
    assert again.url.startswith(f"{review_server}/login/")  # the last test's session is gone
