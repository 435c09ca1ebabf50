"""Real processes for the recovery tests: a web server ledger that mails through a local aiosmtpd,
agent worker processes we SIGKILL, and a Celery worker on Redis DB 2.

Ports come from this suite's range (8200-8299).
"""

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT  # noqa: F401
from tests.processes import celery_app_on, flush_redis, start_celery_worker, stop_celery_worker
from tests.support_agent.fixtures import (  # noqa: F401  (names the agent tests import from here)
    REDIS_URL,
    AgentDesk,
    AgentResult,
    SmtpSink,
    effects_for,
    support_policy,
)


@pytest.fixture
def celery_on_db2() -> Iterator[None]:
    """Point this process's Celery app at this process's own Redis database, then back.
    (The name is from when that database was Redis DB 2.)"""
    with celery_app_on(REDIS_URL) as app:
        assert app.conf.broker_url == REDIS_URL, "CELERY_BROKER_URL in the environment wins"
        yield


@pytest.fixture
def start_worker(desk: AgentDesk) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], Path]]]:
    """Start a real `celery worker` (prefork, one child) for the agents; stop it after the test."""
    flush_redis()
    started: list[subprocess.Popen[bytes]] = []

    def start(**extra_env: str) -> tuple[subprocess.Popen[bytes], Path]:
        env = {
            "INTENTLEDGER_URL": desk.url,
            "INTENTLEDGER_TOKEN": desk.token,
            # the agents' gateway tools run in the worker when it journals in-process: its mail
            # goes to the sink, as the web server's does
            **desk.smtp.mail_env(),
            **extra_env,
        }
        proc = start_celery_worker(
            env=env,
            name="agents-test",
            own_group=True,  # its own process group, like a pod
            without=("AGENT_CRASH", "AGENT_STOP"),  # the test process's crash points stay here
        )
        started.append(proc)
        return proc, proc.log_path  # type: ignore[attr-defined]

    yield start
    for proc in started:
        stop_celery_worker(proc)
