"""Fixtures shared by every test: worker tokens, an authenticated API client, budget policies."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection
from rest_framework.test import APIClient

from runs.models import BudgetPolicy
from runs.tokens import worker_token_create

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def worker_token(db: Any) -> str:
    _, raw = worker_token_create(name="test-worker")
    return raw


@pytest.fixture
def api(worker_token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {worker_token}")
    client.default_format = "json"
    return client


@pytest.fixture
def make_policy(db: Any) -> Callable[..., BudgetPolicy]:
    def make(agent: str, **limits: Any) -> BudgetPolicy:
        values = {
            "max_steps": 20,
            "max_tokens": 100_000,
            "max_wall_seconds": 3600,
            "max_cost_usd": None,
            "max_recoveries": 3,
            **limits,
        }
        return BudgetPolicy.objects.create(name=f"{agent}-policy", agent=agent, **values)

    return make


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_database_url() -> str:
    """The URL of the test database pytest-django created, for processes the tests start."""
    settings = connection.settings_dict
    return f"postgres://{settings['USER'] or 'root'}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{settings['NAME']}"


def wait_for_http(
    url: str, *, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def stop_process(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def gunicorn_process(
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
    workers: int = 2,
    threads: int = 4,
    timeout: int = 30,
    log_name: str = "gunicorn",
    own_group: bool = False,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real gunicorn serving the project against the test database; yields its base URL and
    its master process. `own_group`: the master leads its own process group, so a test can
    SIGKILL the whole node (master and workers) the way a machine dies.

    `env` is added to this process's environment (an SMTP sink, a broker of the suite's own).
    """
    port = port or free_port()
    full_env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "LOG_LEVEL": "WARNING",
        **(env or {}),
    }
    logs = ROOT / ".pytest_cache"
    logs.mkdir(exist_ok=True)
    with open(logs / f"{log_name}-{port}.log", "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "config.wsgi",
                "-b",
                f"127.0.0.1:{port}",
                "-w",
                str(workers),
                "--threads",
                str(threads),
                "--timeout",
                str(timeout),
            ],
            cwd=ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=own_group,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for_http(f"{url}/api/v1/schema/", proc=proc)
            yield url, proc
        finally:
            stop_process(proc)


@contextmanager
def gunicorn_server(
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
    workers: int = 2,
    threads: int = 4,
    timeout: int = 30,
    log_name: str = "gunicorn",
) -> Iterator[str]:
    """A real gunicorn serving the project against the test database; yields its base URL."""
    with gunicorn_process(
        port=port, env=env, workers=workers, threads=threads, timeout=timeout, log_name=log_name
    ) as (url, _proc):
        yield url


@pytest.fixture(scope="session")
def ledger_server(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """A real gunicorn against the test database, for the whole session.

    Tests that talk to it must use `transactional_db` so what they write is committed.
    """
    with gunicorn_server() as url:
        yield url


class FakeClock:
    """The journal's clock, moved by hand (deadlines, lease expiry) in in-process tests."""

    def __init__(self) -> None:
        from django.utils import timezone

        self.now = timezone.now()

    def advance(self, **delta: float) -> None:
        from datetime import timedelta

        self.now += timedelta(**delta)


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr("runs.clock.now", lambda: fake.now)
    return fake


# one Chromium for the whole session: Playwright's sync API allows one per thread
# the agents' real stack (fixed ports): registered once here, shared by every suite that uses it
from tests.agents.fixtures import agent_ledger_url, desk, smtp_sink  # noqa: E402, F401
from tests.review.browser import browser  # noqa: E402, F401  (fixture)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's test database; with TEST_THROUGH_PGBOUNCER=1 every connection of the
    session (and of the servers and workers it starts, which take test_database_url()) then goes
    through a PgBouncer in transaction pooling mode. scripts/test runs the API, recovery and
    dashboard groups that way, with DATABASE_POOLER=pgbouncer as a deployment behind it sets."""
    if os.environ.get("TEST_THROUGH_PGBOUNCER") != "1":
        yield
        return
    from django.conf import settings
    from django.db import connections

    from tests.scale.helpers import pgbouncer

    assert settings.DATABASE_POOLER == "pgbouncer", "TEST_THROUGH_PGBOUNCER needs DATABASE_POOLER"
    upstream = int(connection.settings_dict["PORT"] or 5432)
    # the ?wait= listener keeps its direct connection (LISTEN needs a session), here and in the
    # servers the tests start (they inherit the environment)
    listen_url, settings.DATABASE_LISTEN_URL = settings.DATABASE_LISTEN_URL, test_database_url()
    os.environ["DATABASE_LISTEN_URL"] = settings.DATABASE_LISTEN_URL
    with pgbouncer(pool_size=8, upstream_port=upstream) as port, django_db_blocker.unblock():
        originals = {}
        for conn in connections.all():
            conn.close()
            originals[conn.alias] = (conn.settings_dict["HOST"], conn.settings_dict["PORT"])
            conn.settings_dict.update(HOST="127.0.0.1", PORT=port)
        try:
            yield
        finally:
            for conn in connections.all():
                conn.close()
                host, original_port = originals[conn.alias]
                conn.settings_dict.update(HOST=host, PORT=original_port)
            settings.DATABASE_LISTEN_URL = listen_url
            os.environ.pop("DATABASE_LISTEN_URL", None)


def chain_problems(run_id: Any) -> list[str]:
    """What `verify_journal --run ID` reports for the run (chain and every step field); [] if sound."""
    import io

    from django.core.management import call_command

    out = io.StringIO()
    with suppress(SystemExit):
        call_command("verify_journal", run_id=str(run_id), stdout=out)
    return [line for line in out.getvalue().splitlines() if line.startswith("BROKEN")]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that use the session's Chromium run last, in their own order.

    Playwright's sync API keeps an asyncio loop marked running in the main thread from the first
    browser test on, and Django cannot call an async view (the run detail's `?wait=`) through the
    test client from a thread whose loop is running: every other test goes first.
    """
    items.sort(key=lambda item: "browser" in getattr(item, "fixturenames", ()))
