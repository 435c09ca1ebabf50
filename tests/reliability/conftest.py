"""Reliability suite: chaos, faults and abuse, with nothing lost.

Every test under tests/reliability is marked `reliability` (so `pytest -m reliability` runs it
alone and `-m "not reliability"` skips it). In the normal test command it runs at a bounded
scale (a few minutes in total on a 2-core machine).

Soak mode, for a longer run by hand, scales every knob up (more schemathesis examples, more
concurrent requests, more chaos rounds and kills, longer database outages):

    RELIABILITY_SOAK=1 .venv/bin/python -m pytest tests/reliability -s
    .venv/bin/python -m pytest tests/reliability --soak -s

(`--soak` is only known when tests/reliability is named on the command line; the environment
variable works from anywhere.) `-s` shows the counts the chaos and fault tests print.

Isolation: this suite's servers and brokers listen on TCP ports 8700-8799 only, use Redis DB 7
only, and expect `TEST_DATABASE_NAME` (test_al_rel) so pytest-django gives it its own database.
"""

import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email import message_from_bytes
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from runs.models import BudgetPolicy
from runs.tokens import worker_token_create
from tests.conftest import gunicorn_server, stop_process

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PORT_RANGE = range(8700, 8800)
REDIS_DB = 7


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak", action="store_true", default=False, help="reliability suite: long soak mode"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.reliability)


@dataclass(frozen=True)
class Scale:
    """How hard the suite pushes; soak mode multiplies everything."""

    soak: bool
    schemathesis_examples: int
    concurrent_intents: int
    db_fault_workers: int
    db_fault_steps: int
    db_fault_kills: int
    outage_seconds: float
    chaos_runs: int
    chaos_kills: int


@pytest.fixture(scope="session")
def scale(request: pytest.FixtureRequest) -> Scale:
    soak = bool(os.environ.get("RELIABILITY_SOAK")) or bool(
        request.config.getoption("--soak", default=False)
    )
    if soak:
        return Scale(
            soak=True,
            schemathesis_examples=300,
            concurrent_intents=200,
            db_fault_workers=8,
            db_fault_steps=60,
            db_fault_kills=60,
            outage_seconds=10.0,
            chaos_runs=60,
            chaos_kills=120,
        )
    return Scale(
        soak=False,
        schemathesis_examples=30,
        concurrent_intents=50,
        db_fault_workers=4,
        db_fault_steps=30,
        db_fault_kills=12,
        outage_seconds=2.0,
        chaos_runs=20,
        chaos_kills=30,
    )


def port_in_range() -> int:
    """A free port of this suite's range (8700-8799), never one somebody else may be using."""
    for port in PORT_RANGE:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 8700-8799")


stop = stop_process


@contextmanager
def gunicorn(*, env: dict[str, str] | None = None, workers: int = 2) -> Iterator[str]:
    """A real gunicorn on the test database, on a port of this suite's range; yields its URL."""
    with gunicorn_server(
        port=port_in_range(),
        env=env,
        workers=workers,
        threads=8,
        timeout=60,
        log_name="reliability-gunicorn",
    ) as url:
        yield url


@pytest.fixture(scope="session", autouse=True)
def celery_on_redis_db7() -> Iterator[None]:
    """Anything this suite enqueues from the test process (a reaper re-dispatch) goes to Redis
    DB 7, this suite's own, never to a queue another suite's workers consume."""
    from config.celery import app

    previous = app.conf.broker_url
    app.conf.update(broker_url=f"redis://127.0.0.1:6379/{REDIS_DB}")
    app._after_fork()  # type: ignore[attr-defined]  # drop pooled connections to the old broker
    try:
        yield
    finally:
        app.conf.update(broker_url=previous)
        app._after_fork()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def ledger_server(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """This suite's own gunicorn (ports 8700-8799) on the test database; yields its base URL.

    Overrides tests/conftest.py's fixture of the same name so every server of this suite stays in
    its assigned port range. Tests that use it need `transactional_db`.
    """
    with gunicorn() as url:
        yield url


@pytest.fixture
def raw_token(transactional_db: Any) -> str:
    """A worker token committed to the database, so a live server sees it."""
    _, raw = worker_token_create(name="reliability")
    return raw


class SmtpSink:
    """Every message the local aiosmtpd receives (on a port of this suite's range)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = message_from_bytes(envelope.content)
        with self.lock:
            self.messages.append(
                {"to": list(envelope.rcpt_tos), "message_id": message["Message-ID"]}
            )
        return "250 OK"

    def to(self, address: str) -> list[dict[str, Any]]:
        with self.lock:
            return [m for m in self.messages if address in m["to"]]


@dataclass
class Stack:
    url: str
    token: str
    smtp: SmtpSink
    smtp_port: int
    workdir: Path


@pytest.fixture
def mail_stack(
    transactional_db: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    """A gunicorn whose email backend talks to a local SMTP sink; a token, the support policy
    (20 steps, 10 recoveries) and a small knowledge base."""
    from tools.models import KnowledgeArticle

    sink = SmtpSink()
    smtp_port = port_in_range()
    controller = Controller(sink, hostname="127.0.0.1", port=smtp_port)
    controller.start()
    _, token = worker_token_create(name="reliability-mail")
    BudgetPolicy.objects.update_or_create(
        agent="support",
        defaults={
            "name": "support-chaos",
            "max_steps": 20,
            "max_tokens": 1_000_000,
            "max_wall_seconds": 3600,
            "max_cost_usd": None,
            "max_recoveries": 10,
        },
    )
    for slug, title, body in [
        ("refunds", "Refunds for double charges", "Duplicate card charges are refunded in 5 days."),
        ("invoices", "Reading your invoice", "Each invoice lists charges by date."),
    ]:
        KnowledgeArticle.objects.get_or_create(slug=slug, defaults={"title": title, "body": body})
    env = {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp_port),
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/7",
        **getattr(request.module, "SERVER_ENV", {}),  # a test module's extra server settings
    }
    try:
        with gunicorn(env=env, workers=3) as url:
            yield Stack(url=url, token=token, smtp=sink, smtp_port=smtp_port, workdir=tmp_path)
    finally:
        controller.stop()
