"""Database faults in the middle of running workers: 503 while it is away, nothing lost or doubled.

Why pg_terminate_backend and not a PostgreSQL restart: the PostgreSQL server on this machine is
shared by every developer and test suite running at the same time, so restarting it would break
their runs. Killing the backends of *this suite's* test database is what a worker sees from a
restart (every open connection dies mid-query, the next one is new), and it disturbs nobody
else. The "database away for a while" case additionally sets `ALLOW_CONNECTIONS false` on the
test database for a few seconds, so reconnects fail exactly like against a server that is still
starting, and sets it back in a `finally`. The test's own connection is spared (its pid is
excluded) so the test can keep asserting.
"""

import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
from django.db import connection

from runs.models import BudgetPolicy, Event, Run, Step
from tests.reliability.conftest import ROOT, Scale, Stack
from tests.reliability.helpers import Worker, chain_intact


def _own_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def _kill_backends(database: str, spare: int) -> int:
    """Terminate every connection to `database` but `spare`, from a separate admin connection."""
    import psycopg

    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        user=settings["USER"] or "root",
        dbname="postgres",
        autocommit=True,
    ) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> %s",
            [database, spare],
        ).fetchone()
    return int(row[0]) if row else 0


def _allow_connections(database: str, allowed: bool) -> None:
    import psycopg

    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        user=settings["USER"] or "root",
        dbname="postgres",
        autocommit=True,
    ) as admin:
        admin.execute(
            f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS {"true" if allowed else "false"}'
        )


class Tally:
    """Thread-safe counts of what the workers saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: Counter[int] = Counter()
        self.codes: Counter[str] = Counter()
        self.transport_errors = 0
        self.bad_503: list[str] = []

    def see(self, response: httpx.Response) -> None:
        with self.lock:
            self.statuses[response.status_code] += 1
            if response.status_code >= 400:
                try:
                    error = response.json()["error"]
                    self.codes[error["code"]] += 1
                except Exception:
                    self.bad_503.append(response.text[:200])


def _retrying(
    tally: Tally, call: Callable[[], httpx.Response], *, for_seconds: float = 60
) -> httpx.Response:
    """What the SDK does: retry 503s and dropped connections with a short backoff."""
    deadline = time.monotonic() + for_seconds
    while True:
        try:
            response = call()
        except httpx.TransportError:
            with tally.lock:
                tally.transport_errors += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
            continue
        tally.see(response)
        if response.status_code != 503 or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def _journal_steps(
    server: str, token: str, run_id: str, epoch: int, steps: int, tally: Tally, acked: list[Any]
) -> None:
    worker = Worker(server, token)
    try:
        for index in range(steps):
            intent = _retrying(tally, partial(worker.intent, run_id, epoch, index))
            assert intent.status_code in (200, 201), intent.text
            result = {"ticket": f"{run_id}-{index}"}

            outcome = _retrying(tally, partial(worker.outcome, run_id, epoch, index, result=result))
            assert outcome.status_code == 200, outcome.text
            acked.append((run_id, index, result))
        done = _retrying(
            tally,
            lambda: worker.post(f"/api/v1/runs/{run_id}/complete", {"epoch": epoch, "output": {}}),
        )
        assert done.status_code == 200, done.text
    finally:
        worker.close()


def _assert_nothing_lost_or_doubled(run_ids: list[str], steps: int, acked: list[Any]) -> None:
    for run_id in run_ids:
        run = Run.objects.get(pk=run_id)
        assert run.status == "completed"
        assert (run.step_count, run.used_steps) == (steps, steps)
        assert run.used_tokens == 2 * steps  # each outcome carries 1 + 1 tokens, counted once
        indexes = list(Step.objects.filter(run=run).values_list("index", flat=True))
        assert sorted(indexes) == list(range(steps))
        assert Event.objects.filter(run=run, type="step_intent").count() == steps
        assert Event.objects.filter(run=run, type="step_done").count() == steps
        assert chain_intact(run_id)
    for run_id, index, result in acked:
        assert Step.objects.get(run_id=run_id, index=index).result == result


def _run_workers(
    server: str, token: str, scale: Scale, tally: Tally, fault: Callable[[threading.Event], None]
) -> tuple[list[str], list[Any], float]:
    BudgetPolicy.objects.update_or_create(
        agent="rel-db",
        defaults={
            "name": "rel-db",
            "max_steps": scale.db_fault_steps,
            "max_tokens": 10**9,
            "max_wall_seconds": 3600,
            "max_recoveries": 5,
        },
    )
    setup = Worker(server, token)
    run_ids = []
    epochs = []
    for i in range(scale.db_fault_workers):
        run_id = setup.create(agent="rel-db", external_id=f"dbfault-{time.monotonic_ns()}-{i}")[
            "id"
        ]
        epochs.append(setup.lease(run_id, worker=f"w{i}", ttl=600).json()["epoch"])
        run_ids.append(run_id)
    setup.close()
    acked: list[Any] = []
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            _journal_steps(server, token, run_ids[i], epochs[i], scale.db_fault_steps, tally, acked)
        except BaseException as exc:
            errors.append(exc)

    stop = threading.Event()
    started = time.monotonic()
    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(run_ids))]
    faulter = threading.Thread(target=fault, args=(stop,))
    for thread in threads:
        thread.start()
    faulter.start()
    for thread in threads:
        thread.join(timeout=240)
    stop.set()
    faulter.join(timeout=60)
    assert not errors, errors
    return run_ids, acked, time.monotonic() - started


def test_connections_killed_mid_request_get_503_and_the_journal_loses_and_doubles_nothing(
    ledger_server: str, raw_token: str, transactional_db: Any, scale: Scale
) -> None:
    database = connection.settings_dict["NAME"]
    spare = _own_pid()
    tally = Tally()
    kills = Counter[str]()

    def killer(stop: threading.Event) -> None:
        rng = random.Random(9)
        while not stop.is_set() and kills["rounds"] < scale.db_fault_kills:
            time.sleep(rng.uniform(0.02, 0.1))
            kills["connections"] += _kill_backends(database, spare)
            kills["rounds"] += 1

    run_ids, acked, took = _run_workers(ledger_server, raw_token, scale, tally, killer)
    print(
        f"\ndb kills: {kills['rounds']} rounds, {kills['connections']} connections terminated, "
        f"{took:.1f}s; responses {dict(tally.statuses)}, error codes {dict(tally.codes)}, "
        f"transport errors {tally.transport_errors}"
    )
    assert kills["rounds"] >= min(scale.db_fault_kills, 3)
    assert not any(status >= 500 and status != 503 for status in tally.statuses), tally.statuses
    assert not tally.bad_503, tally.bad_503
    assert set(tally.codes) <= {"database_unavailable"}, tally.codes
    _assert_nothing_lost_or_doubled(run_ids, scale.db_fault_steps, acked)


def test_while_the_database_is_away_the_api_answers_503_then_recovers_and_runs_complete(
    ledger_server: str, raw_token: str, transactional_db: Any, scale: Scale
) -> None:
    database = connection.settings_dict["NAME"]
    spare = _own_pid()
    tally = Tally()
    seen_during_outage: list[httpx.Response] = []
    probe_run = Worker(ledger_server, raw_token)
    probe_id = probe_run.create(external_id="outage-probe")["id"]

    def outage(stop: threading.Event) -> None:
        time.sleep(0.3)  # let the workers get going
        _allow_connections(database, False)
        try:
            _kill_backends(database, spare)
            until = time.monotonic() + scale.outage_seconds
            with httpx.Client(
                base_url=ledger_server, headers={"Authorization": f"Bearer {raw_token}"}
            ) as probe:
                while time.monotonic() < until:
                    seen_during_outage.append(probe.get(f"/api/v1/runs/{probe_id}/"))
                    seen_during_outage.append(
                        probe.post(f"/api/v1/runs/{probe_id}/lease", json={"worker": "probe"})
                    )
                    time.sleep(0.1)
        finally:
            _allow_connections(database, True)

    run_ids, acked, took = _run_workers(ledger_server, raw_token, scale, tally, outage)
    probe_run.close()
    print(
        f"\ndb outage {scale.outage_seconds}s: workers took {took:.1f}s, responses "
        f"{dict(tally.statuses)}; probes during the outage: "
        f"{dict(Counter(r.status_code for r in seen_during_outage))}"
    )
    assert seen_during_outage
    for response in seen_during_outage:
        assert response.status_code == 503, response.text[:300]
        assert response.json()["error"]["code"] == "database_unavailable"
        assert "Traceback" not in response.text
        assert response.headers.get("Retry-After")
    assert tally.statuses[503] >= 1
    assert not any(s >= 500 and s != 503 for s in tally.statuses), tally.statuses
    _assert_nothing_lost_or_doubled(run_ids, scale.db_fault_steps, acked)
    # and the server is healthy again: the probe's lease goes through
    with httpx.Client(
        base_url=ledger_server, headers={"Authorization": f"Bearer {raw_token}"}
    ) as client:
        assert client.get(f"/api/v1/runs/{probe_id}/").status_code == 200


def _start_agent(stack: Stack, ticket: str, customer: str, worker: str) -> subprocess.Popen[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AGENT_CRASH", "AGENT_STOP"))},
        "INTENTLEDGER_URL": stack.url,
        "INTENTLEDGER_TOKEN": stack.token,
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(stack.smtp_port),
    }
    argv = [
        sys.executable,
        "-m",
        "support_agent.support",
        "--ticket",
        ticket,
        "--customer",
        customer,
    ]
    argv += ["--subject", "Charged twice", "--body", "Please refund one charge."]
    argv += ["--worker", worker]
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


# a lost tool execution's key turns stale after 5 s here (not 60), to keep the test short
SERVER_ENV = {"TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS": "5"}


def test_support_agents_run_through_killed_database_connections_and_nothing_doubles(
    mail_stack: Stack, scale: Scale
) -> None:
    """Real agent processes (the SDK retries what is safe) while server connections are killed.

    An agent that stops on an error it may not retry is restarted, as a pod supervisor would.
    Every run ends completed, or in review when a kill landed inside a tool's execution (its key
    stays in progress: the tool side cannot tell a lost execution from a slow one); never failed,
    never an effect twice.
    """
    from tools.models import IdempotencyKey, OutboundEmail, Ticket, TicketComment

    database = connection.settings_dict["NAME"]
    spare = _own_pid()
    tag = uuid.uuid4().hex[:8]
    agents = {f"DB-{tag}-{i}": f"dbagent-{tag}-{i}@example.com" for i in range(6)}
    procs = {t: _start_agent(mail_stack, t, c, f"db-{t}") for t, c in agents.items()}
    exits: dict[str, list[int]] = {t: [] for t in agents}
    rng = random.Random(11)
    kills = terminated = 0
    started = time.monotonic()
    while procs:
        assert time.monotonic() - started < 240, {t: exits[t] for t in procs}
        time.sleep(rng.uniform(0.05, 0.3))
        if kills < scale.db_fault_kills * 2:
            terminated += _kill_backends(database, spare)
            kills += 1
        for ticket, proc in list(procs.items()):
            if proc.poll() is None:
                continue
            exits[ticket].append(proc.returncode)
            if proc.returncode in (0, 3):  # completed, needs_review
                del procs[ticket]
            else:
                assert len(exits[ticket]) < 6, (
                    ticket,
                    exits[ticket],
                    proc.stderr and proc.stderr.read(),
                )
                procs[ticket] = _start_agent(mail_stack, ticket, agents[ticket], f"db-{ticket}")
    took = time.monotonic() - started

    statuses: Counter[str] = Counter()
    for ticket, customer in agents.items():
        run = Run.objects.get(agent="support", external_id=f"ticket:{ticket}")
        statuses[run.status] += 1
        assert run.status in ("completed", "needs_review"), (ticket, run.status, run.error)
        assert chain_intact(str(run.pk))
        assert run.used_steps == run.step_count <= 20
        tickets = Ticket.objects.filter(customer=customer)
        assert tickets.count() <= 1
        assert OutboundEmail.objects.filter(to=customer).count() <= 1
        assert len(mail_stack.smtp.to(customer)) <= 1
        for t in tickets:
            assert TicketComment.objects.filter(ticket=t).count() <= 1
        if run.status == "completed":
            assert tickets.count() == 1 and len(mail_stack.smtp.to(customer)) == 1
        else:
            for step in Step.objects.filter(run=run, state="unknown"):
                key = IdempotencyKey.objects.get(key=step.idempotency_key)
                assert key.state == "in_progress", (step.name, key.state)
    print(
        f"\nagents through db kills: {kills} rounds, {terminated} connections terminated, "
        f"{took:.1f}s; final statuses {dict(statuses)}; worker exits {exits}"
    )
