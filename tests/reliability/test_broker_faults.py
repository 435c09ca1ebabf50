"""Broker faults: the Redis broker is SIGKILLed and restarted while support agents run as Celery
tasks; every run still completes, each effect exactly once.

Twice: with a durable broker (AOF) and with one that comes back empty (its queue lost). The
second found that runs whose task was lost before any lease stayed `pending` forever (the reaper
only sees expired leases); runs.services.enforcement.runs_redispatch_idle (beat) now offers them again.

The broker is a private redis-server this test starts on a port of its own range (8700-8799)
with an append-only file, so restarting it disturbs nobody else's queue. It is killed twice
while tasks are queued, reserved and running. Runs whose task was in flight come back by
redelivery (acks_late, a short visibility timeout) or by the reaper, which this test runs the
way beat would (every couple of seconds) and which re-dispatches interrupted runs.
"""

import shutil
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from runs.chain import run_chain_breaks
from runs.models import Event, Run
from runs.services.enforcement import runs_reap_expired_leases, runs_redispatch_idle
from tests.connection_budget import holds_connections
from tests.processes import start_celery_worker, stop_celery_worker
from tests.reliability.conftest import Stack, port_in_range, stop

RUNS = 12
REDIS_DB = 7


class PrivateRedis:
    """A redis-server of our own (AOF on), that can be killed and started again on one port."""

    def __init__(self, workdir: Path) -> None:
        self.port = port_in_range()
        self.dir = workdir / "redis"
        self.dir.mkdir()
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/{REDIS_DB}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis.from_url(self.url).ping()
                return
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "private redis did not start"
                time.sleep(0.05)

    def kill(self, *, lose_data: bool = False) -> None:
        """SIGKILL; with `lose_data` its files go too (a broker that comes back empty)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        if lose_data:
            shutil.rmtree(self.dir)
            self.dir.mkdir()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    if not shutil.which("redis-server"):
        pytest.skip("redis-server is not installed")
    broker = PrivateRedis(tmp_path)
    broker.start()
    try:
        yield broker
    finally:
        if broker.proc is not None:
            stop(broker.proc)


@pytest.fixture
def celery_app_on(private_redis: PrivateRedis) -> Iterator[Any]:
    """This process's Celery app (the reaper's re-dispatch sends from here) on the private broker."""
    from config.celery import app

    previous = app.conf.broker_url
    app.conf.update(broker_url=private_redis.url)
    app._after_fork()  # type: ignore[attr-defined]  # drop pooled connections to the old broker
    try:
        yield app
    finally:
        app.conf.update(broker_url=previous)
        app._after_fork()  # type: ignore[attr-defined]


@pytest.fixture
@holds_connections(3)  # a prefork pool of 2 and its master
def celery_worker(
    mail_stack: Stack, private_redis: PrivateRedis
) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    log_path = mail_stack.workdir / "celery.log"

    def start() -> subprocess.Popen[bytes]:
        env = {
            "CELERY_BROKER_URL": private_redis.url,
            "CELERY_VISIBILITY_TIMEOUT": "15",
            "INTENTLEDGER_URL": mail_stack.url,
            "INTENTLEDGER_TOKEN": mail_stack.token,
            "AGENT_LEASE_TTL": "6",
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(mail_stack.smtp_port),
        }
        proc = start_celery_worker(
            env=env,
            concurrency=2,
            name="rel-broker",
            heartbeat=True,
            own_group=True,  # ended whole at the end of the test
            log_path=log_path,
            without=("AGENT_CRASH", "AGENT_STOP"),
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        stop_celery_worker(proc)


@pytest.mark.parametrize(
    "lose_data", [False, True], ids=["durable_broker", "broker_loses_its_queue"]
)
def test_broker_killed_and_restarted_while_agents_run_as_tasks_loses_nothing(
    lose_data: bool,
    mail_stack: Stack,
    private_redis: PrivateRedis,
    celery_app_on: Any,
    celery_worker: Callable[[], subprocess.Popen[bytes]],
) -> None:
    from celery_agents.tasks import run_agent
    from support_agent.support import ticket_input
    from tools.models import OutboundEmail, Ticket

    worker = celery_worker()
    worker_exits: list[int | None] = []
    tag = uuid.uuid4().hex[:8]
    runs: dict[str, str] = {}
    with httpx.Client(
        base_url=mail_stack.url, headers={"Authorization": f"Bearer {mail_stack.token}"}
    ) as client:
        for i in range(RUNS):
            customer = f"broker-{tag}-{i}@example.com"
            body = {
                "agent": "support",
                "input": ticket_input(f"B-{tag}-{i}", customer=customer, subject="Twice", body="?"),
                "external_id": f"broker:{tag}:{i}",
            }
            response = client.post("/api/v1/runs/", json=body)
            assert response.status_code == 201, response.text
            runs[response.json()["id"]] = customer
    # runs of the Celery workers, as start_agent_run makes them (runner celery): a task the broker
    # loses before it starts is offered again by the idle sweep
    Run.objects.filter(pk__in=runs).update(runner="celery")
    for run_id in runs:
        run_agent.delay(run_id, "support")

    started = time.monotonic()
    restarts = 0
    reaped = 0
    redispatched = 0
    for pause in (1.0, 2.5):  # kill while tasks are queued, reserved and running
        time.sleep(pause)
        private_redis.kill(lose_data=lose_data)
        time.sleep(1.0)  # the broker is away for a second
        private_redis.start()
        restarts += 1

    deadline = time.monotonic() + 150
    while True:
        statuses = Counter(Run.objects.filter(pk__in=runs).values_list("status", flat=True))
        if set(statuses) <= {"completed", "needs_review", "failed", "abandoned"}:
            break
        assert time.monotonic() < deadline, (
            statuses,
            (mail_stack.workdir / "celery.log").read_text()[-4000:],
        )
        # kombu's Redis transport can end the worker in its own reconnection ("Unrecoverable
        # error: AttributeError: 'NoneType' object has no attribute 'hostname'", raised while it
        # restores unacked messages on the lost connection; once in a dozen full runs here): the
        # worker process exits, and a deployment's supervisor starts it again, as the test does.
        # Its runs' leases lapse and the safety nets below hand them on; nothing may double
        if worker.poll() is not None:
            worker_exits.append(worker.returncode)
            assert len(worker_exits) <= 3, (worker_exits, statuses)
            worker = celery_worker()
        # what beat does every few seconds; asked more often here, the end is seen sooner (an
        # idle run is still offered at most once every 8 s)
        reaped += runs_reap_expired_leases()
        redispatched += runs_redispatch_idle(idle_seconds=8)
        time.sleep(0.5)
    took = time.monotonic() - started

    recovered = Event.objects.filter(
        run_id__in=runs, type="lease_acquired", payload__recovery=True
    ).count()
    print(
        f"\nbroker faults: {restarts} broker kills+restarts, {len(runs)} runs done in {took:.1f}s; "
        f"statuses {dict(statuses)}; leases after a lost worker/task {recovered}; "
        f"runs re-dispatched by the reaper {reaped}, idle runs offered again {redispatched}; "
        f"worker processes restarted after they exited {len(worker_exits)} {worker_exits}"
    )
    assert statuses == {"completed": RUNS}, statuses
    for run_id, customer in runs.items():
        assert Ticket.objects.filter(customer=customer).count() == 1
        assert OutboundEmail.objects.filter(to=customer).count() == 1
        assert len(mail_stack.smtp.to(customer)) == 1
        run = Run.objects.get(pk=run_id)
        assert not run_chain_breaks(run)
        assert run.used_steps == run.step_count == 20
