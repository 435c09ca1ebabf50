"""Browser helpers for the console: screenshots go to the ignored .test-output/screenshots/
unless `UPDATE_SCREENSHOTS=1` (or `CONSOLE_SCREENSHOTS=1`) asks for docs/screenshots/ (the
README's pictures); a test run leaves every tracked file as it was.
"""

from pathlib import Path
from typing import Any

from tests.review.browser import SCREENSHOTS, screenshot_dir  # noqa: F401


def shot(page: Any, name: str, *, selector: str | None = None) -> Path:
    path = screenshot_dir() / f"{name}.png"
    if selector:
        page.locator(selector).screenshot(path=str(path))
    else:
        page.screenshot(path=str(path), full_page=True)
    return path
