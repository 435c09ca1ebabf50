"""Browser helpers for the console: screenshots go to a temporary folder unless asked for.

`CONSOLE_SCREENSHOTS=1` writes them into docs/screenshots/ (the README's pictures); otherwise a
test run leaves every tracked file as it was.
"""

import os
import tempfile
from pathlib import Path
from typing import Any

from tests.review.browser import SCREENSHOTS
from tests.review.factories import PASSWORD

TIMEOUT = 15_000


def screenshot_dir() -> Path:
    if os.environ.get("CONSOLE_SCREENSHOTS") == "1":
        return SCREENSHOTS
    folder = Path(tempfile.gettempdir()) / "agentledger-console-screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


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
