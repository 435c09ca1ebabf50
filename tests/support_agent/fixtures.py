"""The support agent's real stack, shared by every suite that runs agents (agents, console): a
web server ledger that mails through a local aiosmtpd, and the desk that starts agent processes.

A plain module, not a conftest: the root conftest registers its fixtures once, so the session's
SMTP sink and ledger server (ports from the OS, this process's own Redis database) exist once,
however many suites use them.
"""

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runs.models import BudgetPolicy
from runs.services.enforcement import runs_reap_expired_leases
from runs.tokens import worker_token_create
from tests.processes import (
    ROOT,
    SmtpSink,
    redis_url,
    start_celery_worker,
    web_server,
)
from tests.processes import smtp_sink as smtp_sink_running
from tools.models import KnowledgeArticle, OutboundEmail, Ticket

REDIS_URL = redis_url()  # this test process's own Redis database


@pytest.fixture(scope="session")
def smtp_sink() -> Iterator[SmtpSink]:
    with smtp_sink_running() as sink:
        yield sink


@pytest.fixture(scope="session")
def agent_ledger_url(
    django_db_setup: Any, django_db_blocker: Any, smtp_sink: SmtpSink
) -> Iterator[str]:
    """The web server on the test database whose email backend talks to the local SMTP sink."""
    env = {**smtp_sink.mail_env(), "CELERY_BROKER_URL": REDIS_URL}
    with web_server(env=env, log_name="agents-web") as url:
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
            "support_agent.support",
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
                "INTENTLEDGER_URL": self.url,
                "INTENTLEDGER_TOKEN": self.token,
                "EMAIL_HOST": "127.0.0.1",
                "EMAIL_PORT": str(self.smtp.port),
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


def celery_worker_start(
    *,
    broker_url: str,
    ledger_url: str,
    token: str,
    name: str = "agents-test",
    concurrency: int = 1,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], Path]:
    """A real `celery worker` node (prefork) for the agents on `broker_url`, in its own process
    group like a pod (os.killpg kills the node whole); returns it ready, with its log's path.
    Stop it with `tests.processes.stop_celery_worker`."""
    proc = start_celery_worker(
        env={
            "CELERY_BROKER_URL": broker_url,
            "INTENTLEDGER_URL": ledger_url,
            "INTENTLEDGER_TOKEN": token,
            **(env or {}),
        },
        name=name,
        concurrency=concurrency,
        own_group=True,
        without=("AGENT_CRASH", "AGENT_STOP"),  # the test process's crash points stay here
    )
    return proc, proc.log_path  # type: ignore[attr-defined]


def reaped_once_the_lease_lapses(timeout: float = 30) -> int:
    """Run the reaper (beat's task) until it reaps something; how many leases it reaped."""
    deadline = time.monotonic() + timeout
    while (reaped := runs_reap_expired_leases()) == 0:
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.1)
    return reaped


def effects_for(desk: AgentDesk, customer: str) -> tuple[int, int, int]:
    """(tickets, outbound emails, SMTP messages) for one customer."""
    return (
        Ticket.objects.filter(customer=customer).count(),
        OutboundEmail.objects.filter(to=customer).count(),
        len(desk.smtp.to(customer)),
    )
