"""Playwright helpers for the dashboard's browser tests: Debian's Chromium, a live server.

Screenshots go to `.test-output/screenshots/` (ignored by git); `UPDATE_SCREENSHOTS=1` writes
them into docs/screenshots/ instead, the README's pictures. A test run never rewrites a tracked
file.
"""

import os
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "screenshots"  # the README's pictures (UPDATE_SCREENSHOTS=1)
TEST_SCREENSHOTS = ROOT / ".test-output" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


def port_in_my_range() -> int:
    """A free port (kept for the tests that import it; the OS chooses it now)."""
    return free_port()


def screenshot_dir() -> Path:
    """docs/screenshots/ with UPDATE_SCREENSHOTS=1 (or the older SCREENSHOTS=1 /
    CONSOLE_SCREENSHOTS=1), otherwise the ignored .test-output/screenshots/."""
    if any(os.environ.get(name) == "1" for name in UPDATE_SWITCHES):
        return SCREENSHOTS
    TEST_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return TEST_SCREENSHOTS


UPDATE_SWITCHES = ("UPDATE_SCREENSHOTS", "SCREENSHOTS", "CONSOLE_SCREENSHOTS")
TIMEOUT = 15_000  # ms; the suite's pages poll every second (tests/conftest.py)


class PagePool:
    """The browser tests' signed-in pages, kept from one test to the next.

    A new page costs Chromium a renderer process, about 0.7 s of CPU here, against 0.15 s for a
    page load in a renderer it already has, and the suite's browser tests sign in some thirty
    times. Each page has a context of its own (its own cookies: two supervisors side by side);
    when a test ends its cookies are cleared and it waits on a page that polls nothing
    (`resting_url`), and every other page or context the test opened is closed, so nothing of one test's session reaches the next.
    A test that listens to a page's events or adds scripts to it opens a context of its own.
    """

    def __init__(self, browser: Any) -> None:
        self.browser = browser
        self.idle: list[Any] = []
        self.lent: list[Any] = []

    def take(self, viewport: tuple[int, int]) -> Any:
        width, height = viewport
        while self.idle:
            page = self.idle.pop()
            if not page.is_closed():
                page.set_viewport_size({"width": width, "height": height})
                break
        else:
            context = self.browser.new_context(viewport={"width": width, "height": height})
            context.set_default_timeout(TIMEOUT)
            page = context.new_page()
        self.lent.append(page)
        return page

    def give_back(self) -> None:
        """At the end of a test: the pool's pages blanked and idle, everything else closed."""
        lent = {id(page.context): page for page in self.lent if not page.is_closed()}
        idle = {id(page.context) for page in self.idle}
        self.lent.clear()
        for context in self.browser.contexts:
            if id(context) in idle:
                continue
            page = lent.get(id(context))
            try:
                if page is None:
                    context.close()
                    continue
                for other in context.pages:
                    if other is not page:
                        other.close()
                context.clear_cookies()
                page.goto(resting_url(page.url))  # stops the page's polling
                self.idle.append(page)
            except Exception:  # a crashed page: its context goes, the next test gets a new one
                with suppress(Exception):
                    context.close()


def resting_url(url: str) -> str:
    """Where a pooled page waits for its next test: the login page of the origin it is on, which
    polls nothing. Not about:blank: the dashboard's pages are Cross-Origin-Opener-Policy
    same-origin, so Chromium would give the page a new renderer on the way there and another on
    the way back (the very cost the pool saves)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return "about:blank"
    return f"{parts.scheme}://{parts.netloc}/login/"


_pools: dict[int, PagePool] = {}


def page_pool(browser: Any) -> PagePool:
    return _pools.setdefault(id(browser), PagePool(browser))


def signed_in(
    browser: Any,
    base: str,
    username: str,
    *,
    viewport: tuple[int, int] = (1360, 900),
    through_the_form: bool = False,
) -> Any:
    """A page of a context of its own, signed in as `username`, on the dashboard at `base`/
    (the page is the pool's: `PagePool`).

    The session is made the way Django's test client makes one and its cookie handed to the
    browser: two page loads fewer than the login form (Chromium's CPU is a sixth of the suite's).
    `through_the_form`: sign in as a person does, on /login/ (a test of the story keeps that).
    """
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    from tests.review.factories import PASSWORD

    page = page_pool(browser).take(viewport)
    if through_the_form:
        page.goto(f"{base}/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
    else:
        client = Client()
        client.force_login(User.objects.get(username=username))
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        page.context.add_cookies(
            [{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": base}]
        )
        page.goto(f"{base}/")
    page.wait_for_url(f"{base}/")
    return page


def shot(page: Any, name: str, *, mask: tuple[str, ...] = ()) -> Path:
    """A full-page screenshot into `screenshot_dir()`; `mask` hides secrets (a new token)."""
    path = screenshot_dir() / f"{name}.png"
    page.screenshot(
        path=str(path),
        full_page=True,
        mask=[page.locator(selector) for selector in mask],
    )
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    # Playwright's sync API keeps an event loop in this thread; the ORM calls the tests make
    # alongside it are ordinary blocking calls, so Django's async guard is told so.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            yield browser
            _pools.pop(id(browser), None)
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


class Worker:
    """The worker side, over the real worker API: what an agent pod does after a resolution."""

    def __init__(self, base_url: str, token: str, name: str = "w-9") -> None:
        self.http = httpx.Client(
            base_url=f"{base_url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        self.name = name

    def lease(self, run_id: str) -> httpx.Response:
        return self.http.post(
            f"/runs/{run_id}/lease", json={"worker": self.name, "ttl_seconds": 30}
        )

    def finish(self, run_id: str) -> dict[str, Any]:
        """Lease, re-run interrupted steps with their recorded arguments, close the ticket, complete."""
        grant = self.lease(run_id)
        assert grant.status_code == 200, grant.text
        body = grant.json()
        epoch = body["epoch"]
        for step in body["journal"]:
            if step["state"] == "interrupted":
                self._write(
                    run_id,
                    epoch,
                    step["index"],
                    step["name"],
                    step["arguments"],
                    step["enforced_by"],
                )
        self._write(
            run_id,
            epoch,
            len(body["journal"]),
            "tickets.close",
            {"ticket_id": 41, "resolution": "refunded"},
            "tool",
        )
        done = self.http.post(
            f"/runs/{run_id}/complete", json={"epoch": epoch, "output": {"ok": True}}
        )
        assert done.status_code == 200, done.text
        return done.json()

    def _write(
        self, run_id: str, epoch: int, index: int, name: str, args: Any, enforced_by: str
    ) -> None:
        intent = self.http.post(
            f"/runs/{run_id}/steps/",
            json={
                "epoch": epoch,
                "index": index,
                "kind": "tool",
                "name": name,
                "effect": "write",
                "enforced_by": enforced_by,
                "arguments": args,
            },
        )
        assert intent.status_code in (200, 201), intent.text
        outcome = self.http.post(
            f"/runs/{run_id}/steps/{index}/outcome",
            json={
                "epoch": epoch,
                "status": "ok",
                "result": {"done": name},
                "usage": {"input_tokens": 10, "output_tokens": 5},
            },
        )
        assert outcome.status_code == 200, outcome.text


@pytest.fixture(scope="session")
def review_server(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """Django's live server thread on a port of this helper's range, against the test database."""
    from pytest_django.live_server_helper import LiveServer

    server = LiveServer(f"127.0.0.1:{port_in_my_range()}")
    try:
        yield server.url
    finally:
        server.stop()
        # request threads keep their connections (CONN_MAX_AGE); end them so the test
        # database can be dropped. Only backends of this test database are touched.
        from django.db import connection

        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
