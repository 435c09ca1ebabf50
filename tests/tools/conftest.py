"""Tool-side fixtures: a local SMTP server (aiosmtpd), a gunicorn pointed at it, a killable one.

Everything listens on this suite's ports (8100-8199) and uses Redis DB 1 for any broker.
"""

import asyncio
import email
import email.message
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from rest_framework.test import APIClient

from runs.tokens import worker_token_create
from tests.conftest import ROOT, test_database_url, wait_for_http
from tests.tools import fixture_tools

PORT_RANGE = range(8100, 8200)  # this suite's ports; a second session picks the next free ones
BROKER_URL = "redis://127.0.0.1:6379/1"
_taken: set[int] = set()


def port_in_range() -> int:
    """A free port from PORT_RANGE that this process has not handed out yet."""
    for port in PORT_RANGE:
        if port in _taken:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _taken.add(port)
        return port
    raise RuntimeError(f"no free port in {PORT_RANGE}")


class SmtpRecorder:
    """An aiosmtpd handler that keeps every message; `delay` widens the in-progress window."""

    def __init__(self, delay: float = 0.3) -> None:
        self.delay = delay
        self.port = 0
        self.messages: list[email.message.Message] = []
        self._lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        await asyncio.sleep(self.delay)
        with self._lock:
            self.messages.append(email.message_from_bytes(envelope.content))
        return "250 Message accepted for delivery"

    def with_message_id(self, message_id: str) -> list[email.message.Message]:
        with self._lock:
            return [m for m in self.messages if m["Message-ID"] == message_id]


@pytest.fixture(scope="session")
def smtp_server() -> Iterator[SmtpRecorder]:
    recorder = SmtpRecorder()
    recorder.port = port_in_range()
    controller = Controller(recorder, hostname="127.0.0.1", port=recorder.port)
    controller.start()
    try:
        yield recorder
    finally:
        controller.stop()


def _server_env(smtp_port: int) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "LOG_LEVEL": "WARNING",
        "CELERY_BROKER_URL": BROKER_URL,
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp_port),
        "TOOLS_EXTRA_MODULES": "tests.tools.server_tools",
    }


def _gunicorn(port: int, *, workers: int, threads: int, env: dict[str, str]) -> subprocess.Popen:
    log = open(ROOT / ".pytest_cache" / f"tools-gunicorn-{port}.log", "ab")  # noqa: SIM115
    return subprocess.Popen(
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
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so a test can SIGKILL all of it
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def tools_server(
    django_db_setup: Any, django_db_blocker: Any, smtp_server: SmtpRecorder
) -> Iterator[str]:
    """gunicorn (2 workers x 4 threads) against the test database, mailing to `smtp_server`.

    Tests that talk to it must use `transactional_db` so what they write is committed.
    """
    port = port_in_range()
    proc = _gunicorn(port, workers=2, threads=4, env=_server_env(smtp_server.port))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{url}/api/v1/tools/", proc=proc)
        yield url
    finally:
        _stop(proc)


@pytest.fixture
def killable_server(
    django_db_setup: Any, smtp_server: SmtpRecorder
) -> Iterator[Callable[..., tuple[str, subprocess.Popen]]]:
    """Start a one-worker gunicorn in its own process group; the test may SIGKILL the group.

    `start(**env)` adds environment variables (a crash point, a shorter lock timeout)."""
    started: list[subprocess.Popen] = []

    def start(**extra_env: str) -> tuple[str, subprocess.Popen]:
        port = port_in_range()
        env = {**_server_env(smtp_server.port), **extra_env}
        proc = _gunicorn(port, workers=1, threads=2, env=env)
        started.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/api/v1/tools/", proc=proc)
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
