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

Isolation: this suite's servers listen on ports the OS chooses and use this test process's own
Redis database (tests/processes.py); the database is pytest-django's test database.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runs.models import BudgetPolicy
from runs.tokens import worker_token_create
from tests import processes
from tests.connection_budget import holds_connections
from tests.processes import (
    ROOT,  # noqa: F401  (the suite's modules import it from here)
    SmtpSink,
    celery_app_on,
    free_port,
    redis_db,
    redis_url,
    smtp_sink,
    stop_process,
)

HERE = Path(__file__).resolve().parent
REDIS_DB = redis_db()  # this test process's own


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
    """A free port (kept for the tests that import it; the OS chooses it now)."""
    return free_port()


stop = stop_process


SERVER_WORKERS = 2
SERVER_THREADS = 8
# what this suite's web server holds at most: a connection per blocking thread, each keeping
# its own (tests/connection_budget.py)
SERVER_CONNECTIONS = SERVER_WORKERS * SERVER_THREADS


@contextmanager
def web_server(
    *, env: dict[str, str] | None = None, workers: int = SERVER_WORKERS
) -> Iterator[str]:
    """The product's web server on the test database, 8 threads a worker; yields its URL."""
    with processes.web_server(
        env=env, workers=workers, threads=SERVER_THREADS, log_name="reliability-web"
    ) as url:
        yield url


@pytest.fixture(scope="session", autouse=True)
def celery_on_redis_db7() -> Iterator[None]:
    """Anything this suite enqueues from the test process (a reaper re-dispatch) goes to this
    process's own Redis database, never to a queue another session's workers consume. (The name
    is from when that was Redis DB 7.)"""
    with celery_app_on(redis_url()):
        yield


@pytest.fixture(scope="session")
@holds_connections(SERVER_CONNECTIONS)
def ledger_server(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """This suite's own web server (8 threads a worker) on the test database; yields its base URL.

    Overrides tests/conftest.py's fixture of the same name. Tests that use it need
    `transactional_db`.
    """
    with web_server() as url:
        yield url


@pytest.fixture
def raw_token(transactional_db: Any) -> str:
    """A worker token committed to the database, so a live server sees it."""
    _, raw = worker_token_create(name="reliability")
    return raw


@dataclass
class Stack:
    url: str
    token: str
    smtp: SmtpSink
    smtp_port: int
    workdir: Path


@pytest.fixture
@holds_connections(SERVER_CONNECTIONS)
def mail_stack(
    transactional_db: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    """A web server whose email backend talks to a local SMTP sink; a token, the support policy
    (20 steps, 10 recoveries) and a small knowledge base."""
    from tools.models import KnowledgeArticle

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
    with smtp_sink() as sink:
        env = {
            **sink.mail_env(),
            **getattr(request.module, "SERVER_ENV", {}),  # a test module's extra server settings
        }
        # 2 workers x 8 threads: a burst (the races test's 100 threads) holds 16 connections,
        # which leaves room for the rest of the session in 40
        with web_server(env=env) as url:
            yield Stack(url=url, token=token, smtp=sink, smtp_port=sink.port, workdir=tmp_path)
