"""Real processes for the recovery tests: a gunicorn ledger that mails through a local aiosmtpd,
agent worker processes we SIGKILL, and a Celery worker on Redis DB 2.

Ports come from this suite's range (8200-8299).
"""

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from config.celery import app
from tests.agents.fixtures import (  # noqa: F401  (names the agent tests import from here)
    LEDGER_PORT,
    REDIS_URL,
    SMTP_PORT,
    AgentDesk,
    AgentResult,
    SmtpSink,
    effects_for,
    support_policy,
)
from tests.conftest import ROOT
from tests.conftest import test_database_url as database_url


@pytest.fixture
def celery_on_db2() -> Iterator[None]:
    """Point this process's Celery app at Redis DB 2 (our isolation), then back."""
    previous = app.conf.broker_url
    app.conf.update(broker_url=REDIS_URL)
    assert app.conf.broker_url == REDIS_URL, "CELERY_BROKER_URL in the environment wins"
    app._after_fork()  # type: ignore[attr-defined]  # drop pooled connections to the old broker
    try:
        yield
    finally:
        app.conf.update(broker_url=previous)
        app._after_fork()  # type: ignore[attr-defined]


@pytest.fixture
def start_worker(desk: AgentDesk) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], Path]]]:
    """Start a real `celery worker` (prefork, one child) for the agents; stop it after the test."""
    redis.Redis.from_url(REDIS_URL).flushdb()
    started: list[tuple[subprocess.Popen[bytes], Any]] = []

    def start(**extra_env: str) -> tuple[subprocess.Popen[bytes], Path]:
        name = f"agents-test-{uuid.uuid4().hex[:6]}"
        log_path = ROOT / ".pytest_cache" / f"{name}.log"
        log = open(log_path, "wb")  # noqa: SIM115
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("AGENT_CRASH", "AGENT_STOP"))
        }
        env.update(
            {
                "DATABASE_URL": database_url(),
                "CELERY_BROKER_URL": REDIS_URL,
                "LEDGER_URL": desk.url,
                "LEDGER_TOKEN": desk.token,
                **extra_env,
            }
        )
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-l",
                "info",
                "-P",
                "prefork",
                "-c",
                "1",
                "-n",
                f"{name}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, like a pod
        )
        started.append((proc, log))
        deadline = time.monotonic() + 60
        while b"ready." not in log_path.read_bytes():
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "celery worker not ready in 60 s"
            time.sleep(0.2)
        return proc, log_path

    yield start
    for proc, log in started:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
