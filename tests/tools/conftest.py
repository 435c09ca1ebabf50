"""Tool-side fixtures: a local SMTP server (aiosmtpd), a web server pointed at it, a killable one.

Ports come from the OS; any broker is this test process's own Redis database (tests/processes.py).
"""

import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from runs.tokens import worker_token_create
from tests.conftest import ROOT, test_database_url, wait_for_http  # noqa: F401
from tests.processes import (
    SmtpSink,
    free_port,
    redis_url,
    smtp_sink,
    start_web_server,
    stop_process,
)
from tests.tools import fixture_tools

BROKER_URL = redis_url()


def port_in_range() -> int:
    """A free port (kept for the tests that import it; the OS chooses it now)."""
    return free_port()


class SmtpRecorder(SmtpSink):
    """An SMTP sink that holds each message 0.3 s by default (a wider in-progress window)."""

    def __init__(self, delay: float = 0.3) -> None:
        super().__init__(delay=delay)

    @property
    def messages(self) -> list[Any]:
        """Every message received, as email.message.Message."""
        return self.raw


@pytest.fixture(scope="session")
def smtp_server() -> Iterator[SmtpRecorder]:
    with smtp_sink(SmtpRecorder()) as recorder:
        yield recorder


def server_env_for(smtp_port: int) -> dict[str, str]:
    return {
        "CELERY_BROKER_URL": BROKER_URL,
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp_port),
        "TOOLS_EXTRA_MODULES": "tests.tools.server_tools",
    }


def _web_server(*, workers: int, threads: int, env: dict[str, str]) -> tuple[str, subprocess.Popen]:
    # its own process group, so a test can SIGKILL all of it
    return start_web_server(
        env=env,
        workers=workers,
        threads=threads,
        log_name="tools-web",
        ready_path="/api/v1/tools/",
        own_group=True,
    )


_stop = stop_process


@pytest.fixture(scope="session")
def tools_server(
    django_db_setup: Any, django_db_blocker: Any, smtp_server: SmtpRecorder
) -> Iterator[str]:
    """The web server (2 workers x 4 threads) against the test database, mailing to `smtp_server`.

    Tests that talk to it must use `transactional_db` so what they write is committed.
    """
    url, proc = _web_server(workers=2, threads=4, env=server_env_for(smtp_server.port))
    try:
        yield url
    finally:
        _stop(proc)


@pytest.fixture
def killable_server(
    django_db_setup: Any, smtp_server: SmtpRecorder
) -> Iterator[Callable[..., tuple[str, subprocess.Popen]]]:
    """Start a one-worker web server in its own process group; the test may SIGKILL the group.

    `start(**env)` adds environment variables (a crash point, a shorter lock timeout)."""
    started: list[subprocess.Popen] = []

    def start(**extra_env: str) -> tuple[str, subprocess.Popen]:
        url, proc = _web_server(
            workers=1, threads=2, env={**server_env_for(smtp_server.port), **extra_env}
        )
        started.append(proc)
        return url, proc

    yield start
    for proc in started:
        _stop(proc)


@pytest.fixture
def test_tools() -> Iterator[None]:
    """Register the test-only tools in this process for one test."""
    fixture_tools.register()
    for name in fixture_tools.CALLS:
        fixture_tools.CALLS[name] = 0
    yield
    fixture_tools.unregister()


@pytest.fixture
def direct_api(db: Any) -> APIClient:
    """A client whose token has the `tools:direct` scope: free-form keys, as a non-agent caller
    uses them. The key protocol's own tests use it; agents' keys name journalled steps."""
    _, raw = worker_token_create(name="test-direct", scopes=("tools:direct",))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.default_format = "json"
    return client


@pytest.fixture
def invoke(direct_api: APIClient) -> Callable[..., Any]:
    """POST /api/v1/tools/{name}/invoke in-process, with an optional Idempotency-Key (free-form
    keys: a `tools:direct` token)."""

    def call(name: str, arguments: Any, key: str | None = None, **body: Any) -> Any:
        headers = {"Idempotency-Key": key} if key is not None else {}
        return direct_api.post(
            f"/api/v1/tools/{name}/invoke",
            {"arguments": arguments, **body},
            format="json",
            headers=headers,
        )

    return call
