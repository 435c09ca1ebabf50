"""The rendered API reference works offline and under the site's Content-Security-Policy."""

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


def test_the_api_docs_page_renders_every_operation_from_our_own_server(
    transactional_db: Any, ledger_server: str
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed")
    from playwright.sync_api import sync_playwright

    foreign_requests: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.add_init_script(
                "window.__csp = [];"
                "document.addEventListener('securitypolicyviolation', e =>"
                " window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
            )
            page.on(
                "request",
                lambda r: (
                    None if r.url.startswith(ledger_server) else foreign_requests.append(r.url)
                ),
            )
            response = page.goto(f"{ledger_server}/api/v1/docs/")
            assert response is not None and response.status == 200
            page.wait_for_selector("text=Agent Ledger worker API", timeout=20_000)
            page.get_by_text("/api/v1/runs/{run_id}/lease", exact=True).wait_for(timeout=20_000)
            assert page.locator(".opblock").count() >= 12  # every operation, the tool gateway too
            assert page.evaluate("window.__csp") == []
        finally:
            browser.close()
    assert [url for url in foreign_requests if not url.startswith("data:")] == []
