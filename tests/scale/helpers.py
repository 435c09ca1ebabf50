"""A supervisor signing in to a served dashboard over real HTTP."""

import re

import httpx


def log_in(browser: httpx.Client, base: str, username: str, password: str) -> None:
    page = browser.get(f"{base}/login/")
    assert page.status_code == 200, page.text[:300]
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert csrf is not None, "the login page carries a CSRF token"
    signed_in = browser.post(
        f"{base}/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": csrf.group(1)},
        headers={"Referer": f"{base}/login/"},
    )
    assert signed_in.status_code in (200, 302), signed_in.text[:300]
    assert "sessionid" in browser.cookies, "signed in"
