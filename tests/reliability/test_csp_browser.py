"""The dashboard still works under its Content-Security-Policy, in a real browser.

Chromium loads the main pages as a logged-in supervisor, with the production CSP; any
`securitypolicyviolation` (a blocked inline script, style or eval) fails the test, and htmx
must have loaded (a blocked script would leave `window.htmx` undefined).
"""

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.reliability.conftest import web_server

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
def dashboard(transactional_db: Any) -> Iterator[str]:
    with web_server(env={"SECURE_COOKIES": "0"}) as url:
        yield url


def test_dashboard_pages_load_with_no_csp_violation(dashboard: str, browser: Any) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed")
    from tests.review.factories import killed_support_run, user_in

    item = killed_support_run(external_id=f"csp-{secrets.token_hex(3)}")
    client = Client()
    client.force_login(user_in("supervisors", "csp-sup"))
    session = client.cookies["sessionid"].value
    pages = ["/", "/queue/", f"/runs/{item.run_id}/", f"/queue/{item.run_id}/{item.index}/"]

    context = browser.new_context()
    try:
        context.add_cookies([{"name": "sessionid", "value": session, "url": dashboard}])
        page = context.new_page()
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text))
        page.add_init_script(
            "window.__csp = [];"
            "document.addEventListener('securitypolicyviolation', e =>"
            " window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
        )
        for path in pages:
            response = page.goto(dashboard + path)
            assert response is not None and response.status == 200, path
            assert "script-src" in (response.headers.get("content-security-policy") or "")
            page.wait_for_load_state("networkidle")
            violations = page.evaluate("window.__csp")
            assert violations == [], (path, violations, console)
            assert page.evaluate("typeof window.htmx") == "object", path
        assert not [m for m in console if "Content Security Policy" in m], console
        # control: an injected inline script is blocked and reported (the policy is live)
        with contextlib.suppress(Exception):  # Playwright raises for the blocked script
            page.add_script_tag(content="window.__inline_ran = true;")
        page.wait_for_timeout(200)
        assert page.evaluate("window.__inline_ran === undefined")
        assert any("script-src" in v for v in page.evaluate("window.__csp"))
    finally:
        context.close()
