"""Real processes for the recovery tests: a gunicorn ledger that mails through a local aiosmtpd,
agent worker processes we SIGKILL, and a Celery worker on Redis DB 2.

Ports come from this suite's range (8200-8299).
"""

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.agents.fixtures import (  # noqa: F401  (names the agent tests import from here)
    LEDGER_PORT,
    REDIS_URL,
    SMTP_PORT,
    AgentDesk,
    AgentResult,
    SmtpSink,
    celery_app_on,
    celery_worker_start,
    celery_worker_stop,
    effects_for,
    support_policy,
)


@pytest.fixture
def celery_on_db2() -> Iterator[None]:
    """Point this process's Celery app at Redis DB 2 (our isolation), then back."""
    with celery_app_on(REDIS_URL):
        yield


@pytest.fixture
def start_worker(desk: AgentDesk) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], Path]]]:
    """Start a real `celery worker` (prefork, one child) for the agents; stop it after the test."""
    redis.Redis.from_url(REDIS_URL).flushdb()
    started: list[subprocess.Popen[bytes]] = []

    def start(**extra_env: str) -> tuple[subprocess.Popen[bytes], Path]:
        proc, log_path = celery_worker_start(
            broker_url=REDIS_URL, ledger_url=desk.url, token=desk.token, env=extra_env
        )
        started.append(proc)
        return proc, log_path

    yield start
    for proc in started:
        celery_worker_stop(proc)
