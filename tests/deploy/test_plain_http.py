"""A ledger served over plain HTTP at a real host name, as the README's own-database block
serves it: with secure cookies on (the default) a browser keeps the sign-in cookies for HTTPS
only, and the refused sign-in says what to set instead of Django's generic "CSRF verification
failed"; with SECURE_COOKIES=0 sign-in goes through. An address the ledger does not know as its
own is named with the setting that would admit it."""

import re
from typing import Any

import httpx
import pytest

from tests.deploy.test_health import ledger_web

pytestmark = pytest.mark.slow


def sign_in(client: httpx.Client, **headers: str) -> httpx.Response:
    """The login form as a browser sends it (httpx, like a browser, keeps a Secure cookie off
    plain HTTP unless the host is localhost)."""
    page = client.get("/login/")
    assert page.status_code == 200
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token is not None
    form = {"csrfmiddlewaretoken": token.group(1), "username": "nobody", "password": "wrong"}
    return client.post(
        "/login/", data=form, headers={"Referer": f"{client.base_url}/login/", **headers}
    )


@pytest.mark.pg_connections(2)
def test_plain_http_with_secure_cookies_refuses_sign_in_with_a_page_naming_the_setting(
    django_db_setup: Any,
) -> None:
    with ledger_web(DEBUG="0") as url, httpx.Client(base_url=url, timeout=30) as client:
        refused = sign_in(client)
        assert refused.status_code == 403
        assert "CSRF verification failed" not in refused.text
        assert "SECURE_COOKIES=0" in refused.text and "HTTPS" in refused.text


@pytest.mark.pg_connections(2)
def test_with_secure_cookies_off_plain_http_signs_in_and_an_unknown_origin_is_named(
    django_db_setup: Any,
) -> None:
    with (
        ledger_web(DEBUG="0", SECURE_COOKIES="0") as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        # the form is checked and the wrong password said (200), not refused (403)
        assert sign_in(client).status_code == 200
        elsewhere = sign_in(client, Origin="http://ledger.example.com:8000")
        assert elsewhere.status_code == 403
        assert "CSRF_TRUSTED_ORIGINS" in elsewhere.text
        assert "http://ledger.example.com:8000" in elsewhere.text
