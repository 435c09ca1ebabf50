"""Playwright helpers for the dashboard's browser tests: Debian's Chromium, a server in 8300-8399."""

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


def port_in_my_range() -> int:
    """The review helper's ports are 8300-8399; take the first free one."""
    for port in range(8300, 8400):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 8300-8399")


def shot(page: Any, name: str, *, mask: tuple[str, ...] = ()) -> None:
    """A full-page screenshot into docs/screenshots/, only when SCREENSHOTS=1 asks (a test run
    must not rewrite tracked files); `mask` hides secrets (a new token)."""
    if os.environ.get("SCREENSHOTS") != "1":
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(
        path=str(SCREENSHOTS / f"{name}.png"),
        full_page=True,
        mask=[page.locator(selector) for selector in mask],
    )


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
