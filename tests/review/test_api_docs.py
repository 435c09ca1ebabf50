"""The rendered API reference works offline and under the site's Content-Security-Policy."""

from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_api_docs_page_renders_every_operation_from_our_own_server(
    browser: Any, review_server: str
) -> None:
    foreign_requests: list[str] = []
    page = browser.new_page()
    try:
        page.add_init_script(
            "window.__csp = [];"
            "document.addEventListener('securitypolicyviolation', e =>"
            " window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
        )
        page.on(
            "request",
            lambda r: None if r.url.startswith(review_server) else foreign_requests.append(r.url),
        )
        response = page.goto(f"{review_server}/api/v1/docs/")
        assert response is not None and response.status == 200
        page.wait_for_selector("text=Agent Ledger worker API", timeout=20_000)
        page.get_by_text("/api/v1/runs/{run_id}/lease", exact=True).wait_for(timeout=20_000)
        assert page.locator(".opblock").count() >= 12  # every operation, the tool gateway too
        assert page.evaluate("window.__csp") == []
    finally:
        page.close()
    assert [url for url in foreign_requests if not url.startswith("data:")] == []
