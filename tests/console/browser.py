"""Browser helpers for the console: screenshots go to the ignored .test-output/screenshots/
unless `UPDATE_SCREENSHOTS=1` (or `CONSOLE_SCREENSHOTS=1`) asks for docs/screenshots/ (the
README's pictures); a test run leaves every tracked file as it was.
"""

from pathlib import Path
from typing import Any

from tests.review.browser import SCREENSHOTS, screenshot_dir  # noqa: F401
from tests.review.factories import PASSWORD

TIMEOUT = 15_000


def shot(page: Any, name: str, *, selector: str | None = None) -> Path:
    path = screenshot_dir() / f"{name}.png"
    if selector:
        page.locator(selector).screenshot(path=str(path))
    else:
        page.screenshot(path=str(path), full_page=True)
    return path


def login(browser: Any, base: str, username: str) -> Any:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    context.set_default_timeout(TIMEOUT)
    page = context.new_page()
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    return page
