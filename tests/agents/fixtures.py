"""The support agent's real stack, shared by every suite that runs agents (agents, console): a
gunicorn ledger that mails through a local aiosmtpd, and the desk that starts agent processes.

A plain module, not a conftest: the root conftest registers its fixtures once, so the session's
SMTP sink and ledger server (on fixed ports from the 8200-8299 range) exist once, however many
suites use them.
"""

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from runs.models import BudgetPolicy
from runs.tokens import worker_token_create
from tests.agents.ports import port_in_range
from tests.conftest import ROOT, gunicorn_server
from tests.conftest import test_database_url as database_url
from tools.models import KnowledgeArticle, OutboundEmail, Ticket

LEDGER_PORT = port_in_range(8210, 8219)
SMTP_PORT = port_in_range(8220, 8229)
REDIS_URL = "redis://127.0.0.1:6379/2"


class SmtpSink:
    """Collects every message the local SMTP server receives."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = message_from_bytes(envelope.content)
        with self._lock:
            self.messages.append(
                {
                    "to": list(envelope.rcpt_tos),
                    "subject": message["Subject"],
                    "message_id": message["Message-ID"],
                }
            )
        return "250 Message accepted for delivery"

    def to(self, address: str) -> list[dict[str, Any]]:
        with self._lock:
            return [m for m in self.messages if address in m["to"]]


@pytest.fixture(scope="session")
def smtp_sink() -> Iterator[SmtpSink]:
    sink = SmtpSink()
    controller = Controller(sink, hostname="127.0.0.1", port=SMTP_PORT)
    controller.start()
    try:
        yield sink
    finally:
        controller.stop()


@pytest.fixture(scope="session")
def agent_ledger_url(
    django_db_setup: Any, django_db_blocker: Any, smtp_sink: SmtpSink
) -> Iterator[str]:
    """gunicorn on the test database whose email backend talks to the local SMTP sink."""
    env = {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(SMTP_PORT),
        "CELERY_BROKER_URL": REDIS_URL,
    }
    with gunicorn_server(port=LEDGER_PORT, env=env, log_name="agents-gunicorn") as url:
        yield url


@dataclass
class AgentResult:
    returncode: int
    summary: dict[str, Any]
    stderr: str
    started_at: float
    ended_at: float


@dataclass
class AgentDesk:
    """Starts agent worker processes against the ledger, the way a pod would."""

    url: str
    token: str
    smtp: SmtpSink
    env: dict[str, str] = field(default_factory=dict)

    def new_ticket(self) -> tuple[str, str]:
        """A fresh inbound ticket id and customer address (so counts are per test)."""
        tag = uuid.uuid4().hex[:10]
        return f"T-{tag}", f"cust-{tag}@example.com"

    def start(
        self, ticket: str, customer: str, *, worker: str = "pod-1", args: str = "", **env: str
    ) -> Any:
        return subprocess.Popen(
            self._argv(ticket, customer, worker) + args.split(),
            cwd=ROOT,
            env=self._env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(
        self,
        ticket: str,
        customer: str,
        *,
        worker: str = "pod-1",
        args: str = "",
        timeout: float = 120,
        **env: str,
    ) -> AgentResult:
        started = time.time()
        proc = subprocess.run(
            self._argv(ticket, customer, worker) + args.split(),
            cwd=ROOT,
            env=self._env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        ended = time.time()
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        summary = json.loads(lines[-1]) if lines else {}
        return AgentResult(proc.returncode, summary, proc.stderr, started, ended)

    def _argv(self, ticket: str, customer: str, worker: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "agents.support",
            "--ticket",
            ticket,
            "--customer",
            customer,
            "--subject",
            "Charged twice for my invoice",
            "--body",
            "My card was charged twice for invoice INV-2291. Please refund one charge.",
            "--worker",
            worker,
        ]

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AGENT_CRASH", "AGENT_STOP", "AGENT_EMAIL"))
        }
        env.update(
            {
                "LEDGER_URL": self.url,
                "LEDGER_TOKEN": self.token,
                "EMAIL_HOST": "127.0.0.1",
                "EMAIL_PORT": str(SMTP_PORT),
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        env.update(self.env)
        env.update(extra)
        return env


def support_policy(**limits: Any) -> BudgetPolicy:
    values = {
        "max_steps": 20,
        "max_tokens": 100_000,
        "max_wall_seconds": 3600,
        "max_cost_usd": None,
        "max_recoveries": 3,
        **limits,
    }
    policy, _ = BudgetPolicy.objects.update_or_create(
        agent="support", defaults={"name": "support-policy", **values}
    )
    return policy


def support_desk_token(name: str = "agents-test") -> str:
    """A worker token, the support agent's budget and a small knowledge base; the raw token."""
    _, token = worker_token_create(name=name)
    support_policy()
    for slug, title, body in [
        ("refunds", "Refunds for double charges", "Duplicate card charges are refunded in 5 days."),
        ("invoices", "Reading your invoice", "Each invoice lists charges by date."),
        ("passwords", "Resetting a password", "Reset links expire after one hour."),
    ]:
        KnowledgeArticle.objects.get_or_create(slug=slug, defaults={"title": title, "body": body})
    return token


@pytest.fixture
def desk(agent_ledger_url: str, smtp_sink: SmtpSink, transactional_db: Any) -> AgentDesk:
    """A worker token, the support agent's budget and a small knowledge base."""
    return AgentDesk(url=agent_ledger_url, token=support_desk_token(), smtp=smtp_sink)


@contextmanager
def celery_app_on(broker_url: str) -> Iterator[None]:
    """Point this process's Celery app (what it enqueues: agent runs, re-dispatches) at a suite's
    own broker, then back."""
    from config.celery import app

    previous = app.conf.broker_url
    app.conf.update(broker_url=broker_url)
    assert app.conf.broker_url == broker_url, "CELERY_BROKER_URL in the environment wins"
    app._after_fork()  # type: ignore[attr-defined]  # drop pooled connections to the old broker
    try:
        yield
    finally:
        app.conf.update(broker_url=previous)
        app._after_fork()  # type: ignore[attr-defined]


def celery_worker_start(
    *,
    broker_url: str,
    ledger_url: str,
    token: str,
    name: str | None = None,
    concurrency: int = 1,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], Path]:
    """A real `celery worker` node (prefork) for the agents, in its own process group like a pod
    (os.killpg kills the node whole); `env` is added to this process's environment. Returns once it is ready, with its log's path. The caller
    stops it (`celery_worker_stop`)."""
    name = name or f"agents-test-{uuid.uuid4().hex[:6]}"
    log_path = ROOT / ".pytest_cache" / f"{name}.log"
    log_path.parent.mkdir(exist_ok=True)
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AGENT_CRASH", "AGENT_STOP"))
    }
    full_env.update(
        {
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": broker_url,
            "LEDGER_URL": ledger_url,
            "LEDGER_TOKEN": token,
            **(env or {}),
        }
    )
    with open(log_path, "wb") as log:
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
                str(concurrency),
                "-n",
                f"{name}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, like a pod
        )
    deadline = time.monotonic() + 60
    while b"ready." not in log_path.read_bytes():
        assert proc.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, "celery worker not ready in 60 s"
        time.sleep(0.2)
    return proc, log_path


def celery_worker_stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def effects_for(desk: AgentDesk, customer: str) -> tuple[int, int, int]:
    """(tickets, outbound emails, SMTP messages) for one customer."""
    return (
        Ticket.objects.filter(customer=customer).count(),
        OutboundEmail.objects.filter(to=customer).count(),
        len(desk.smtp.to(customer)),
    )
