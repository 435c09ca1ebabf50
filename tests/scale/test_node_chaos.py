"""Two web nodes and two Celery worker nodes on one PostgreSQL and one broker; one of each is
SIGKILLed mid-run, whole (master and workers, as a machine dies). Nothing is lost, nothing is done
twice.

The support agent runs on the worker nodes and reaches the ledger through a round-robin balancer
over both web nodes, so its calls are spread over them and, after the kill, go to the survivor.
A web node killed while it runs a tool leaves that key `in_progress`, which recovery rightly
sends to a supervisor (the review queue's case: tests/tools/test_gateway_step_crashes.py kills
inside a tool); this test kills between tool executions, so every run must finish on its own.
Beat's two safety nets (the reaper of expired leases and the re-dispatch of idle runs) are called
by the test while it waits, as beat would call them. The counts of runs, steps and effects before
the kill and at the end are printed (`-s` shows them).

Isolation: Redis DB 8 (no other suite uses it), OS-assigned ports for the web nodes and the
balancer, the session's SMTP sink of tests/support_agent/fixtures.py.
"""

import os
import signal
import time
import uuid
from collections import Counter
from typing import Any

import pytest
import redis
from django.db.models import QuerySet

from celery_agents.services import agent_run_start
from runs.chain import run_chain_breaks
from runs.constants import StepState
from runs.models import Event, Run, Step
from runs.services.enforcement import runs_reap_expired_leases, runs_redispatch_idle
from runs.vocabulary import EventType
from support_agent.support import ticket_input
from tests.processes import celery_app_on, redis_url, stop_celery_worker, web_server_process
from tests.scale.helpers import RoundRobinBalancer
from tests.support_agent.fixtures import (
    SmtpSink,
    celery_worker_start,
    support_desk_token,
)
from tools.models import IdempotencyKey, KeyStatus, OutboundEmail, Ticket

# two web nodes of 8 threads and two Celery nodes, each thread and process with its connection
pytestmark = [pytest.mark.slow, pytest.mark.pg_connections(20)]

BROKER_URL = redis_url()  # this test process's own Redis database
RUNS = 16
LEASE_TTL = "5"


def counts(customers: list[str], smtp: SmtpSink) -> dict[str, Any]:
    runs = Run.objects.filter(agent="support", input__ticket__customer__in=customers)
    return {
        "runs": dict(Counter(runs.values_list("status", flat=True))),
        "steps": Step.objects.filter(run__in=runs).count(),
        "tickets": Ticket.objects.filter(customer__in=customers).count(),
        "emails": OutboundEmail.objects.filter(to__in=customers).count(),
        "smtp_messages": sum(len(smtp.to(c)) for c in customers),
    }


def worker_node_1_mid_run(run_ids: list[uuid.UUID], victim_worker: str) -> Run | None:
    return Run.objects.filter(
        pk__in=run_ids,
        status="running",
        lease_worker__startswith=victim_worker,
        step_count__gte=3,
        step_count__lt=18,
    ).first()


def why_stopped(runs: "QuerySet[Run]") -> list[dict[str, Any]]:
    """What a failure says about a run that did not finish: its reason, and each step that is
    not done with the state of its idempotency key."""
    steps = Step.objects.filter(run__in=runs).exclude(state=StepState.DONE).order_by("index")
    keys = dict(
        IdempotencyKey.objects.filter(key__in=[step.idempotency_key for step in steps]).values_list(
            "key", "state"
        )
    )
    return [
        {
            "run": str(run.pk),
            "status": run.status,
            "reason": run.status_reason,
            "steps": [
                (step.index, step.name, step.state, step.executions, keys.get(step.idempotency_key))
                for step in steps
                if step.run_id == run.pk
            ],
        }
        for run in runs
    ]


def test_one_web_node_and_one_worker_node_killed_mid_run_lose_nothing_and_double_nothing(
    transactional_db: Any, smtp_sink: SmtpSink
) -> None:
    redis.Redis.from_url(BROKER_URL).flushdb()
    token = support_desk_token(name="node-chaos")
    web_env = {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp_sink.port),
        "CELERY_BROKER_URL": BROKER_URL,
    }
    tag = uuid.uuid4().hex[:8]
    customers = [f"nodes-{tag}-{i}@example.com" for i in range(RUNS)]
    workers = []
    with (
        web_server_process(env=web_env, workers=2, threads=4, own_group=True, log_name="web-a") as (
            node_a,
            web_a,
        ),
        web_server_process(env=web_env, workers=2, threads=4, own_group=True, log_name="web-b") as (
            node_b,
            _web_b,
        ),
        celery_app_on(BROKER_URL),
    ):
        balancer = RoundRobinBalancer([node_a, node_b])
        try:
            for n in (1, 2):
                workers.append(
                    celery_worker_start(
                        broker_url=BROKER_URL,
                        ledger_url=balancer.url,
                        token=token,
                        name=f"chaos-w{n}-{tag}",
                        concurrency=2,
                        # the web nodes are what this test kills: journal over HTTP through them
                        env={"AGENT_LEASE_TTL": LEASE_TTL, "LEDGER_AGENT_TRANSPORT": "http"},
                    )[0]
                )
            victim_worker = f"celery:chaos-w1-{tag}-"  # the node name: <name>-<suffix>@<host>
            run_ids = []
            for i, customer in enumerate(customers):
                run, _ = agent_run_start(
                    agent="support",
                    input=ticket_input(
                        f"T-{tag}-{i}", customer=customer, subject="Charged twice", body="Refund?"
                    ),
                    external_id=f"ticket:T-{tag}-{i}",
                    actor="test",
                )
                run_ids.append(run.pk)

            # chaos: once three runs are done and worker node 1 is in the middle of one, and no
            # web node is inside a tool, kill web node A and then worker node 1, each whole,
            # with SIGKILL. Web node A is frozen (SIGSTOP) before the last look at the keys: a
            # key it reserved between that look and the kill would be a real "maybe sent", which
            # recovery rightly sends to review (a full run met that race when A was killed live)
            deadline = time.monotonic() + 120
            while True:
                assert time.monotonic() < deadline, counts(customers, smtp_sink)
                completed = Run.objects.filter(pk__in=run_ids, status="completed").count()
                assert completed < RUNS, "every run finished before the chaos could start"
                if completed >= 3 and worker_node_1_mid_run(run_ids, victim_worker) is not None:
                    os.killpg(web_a.pid, signal.SIGSTOP)
                    time.sleep(0.2)  # a reservation it had already sent commits now
                    mid_run = worker_node_1_mid_run(run_ids, victim_worker)
                    inside_a_tool = IdempotencyKey.objects.filter(state=KeyStatus.IN_PROGRESS)
                    if mid_run is not None and not inside_a_tool.exists():
                        break  # some effects exist already, and none is half done
                    os.killpg(web_a.pid, signal.SIGCONT)
                time.sleep(0.05)
            os.killpg(web_a.pid, signal.SIGKILL)
            os.killpg(workers[0].pid, signal.SIGKILL)
            served_before = balancer.served_once_down(node_a)
            before = counts(customers, smtp_sink)
            held_by_the_dead_node = set(
                Run.objects.filter(
                    pk__in=run_ids, status="running", lease_worker__startswith=victim_worker
                ).values_list("pk", flat=True)
            )
            print(f"\nkilled web node {node_a} and worker node 1 during run {mid_run.pk}")
            print(f"before: {before}")
            print(f"connections per web node before the kill: {served_before}")
            assert web_a.wait(timeout=10) == -signal.SIGKILL
            assert workers[0].wait(timeout=10) == -signal.SIGKILL
            assert 3 <= before["runs"].get("completed", 0) < RUNS
            assert before["steps"] < RUNS * 20
            assert 3 <= before["tickets"] < RUNS and 3 <= before["smtp_messages"] < RUNS

            # the survivors finish everything; beat's safety nets hand the dead node's runs on
            deadline = time.monotonic() + 240
            while Run.objects.filter(pk__in=run_ids, status="completed").count() < RUNS:
                assert time.monotonic() < deadline, counts(customers, smtp_sink)
                stopped = Run.objects.filter(
                    pk__in=run_ids, status__in=["needs_review", "failed", "budget_exceeded"]
                )
                assert not stopped.exists(), (counts(customers, smtp_sink), why_stopped(stopped))
                runs_reap_expired_leases()
                runs_redispatch_idle(idle_seconds=10)  # a run at most once every 10 s
                time.sleep(0.25)
            after = counts(customers, smtp_sink)
            served_after = dict(balancer.served)
        finally:
            balancer.close()
            for proc in workers:
                stop_celery_worker(proc)

    recovered = Event.objects.filter(
        run_id__in=run_ids, type="lease_acquired", payload__recovery=True
    ).count()
    print(f"after: {after}")
    print(f"connections per web node at the end: {served_after}")
    print(f"recovery leases: {recovered}")
    print(f"runs the dead worker node held: {len(held_by_the_dead_node)}")

    # both web nodes served the agents' calls before the kill; only the survivor after it
    assert served_before.get(node_a, 0) > 0 and served_before.get(node_b, 0) > 0
    assert served_after[node_a] == served_before[node_a]
    assert served_after[node_b] > served_before[node_b]
    # nothing lost: every run completed its 20 steps, on a clean chain
    assert after["runs"] == {"completed": RUNS}
    assert after["steps"] == RUNS * 20
    for run in Run.objects.filter(pk__in=run_ids):
        assert (run.step_count, run.used_steps) == (20, 20)
        assert run_chain_breaks(run) == []
    # the run that was in flight on the killed worker node was taken over from its journal
    leases = list(Event.objects.filter(run_id=mid_run.pk, type="lease_acquired").order_by("seq"))
    assert leases[-1].payload["recovery"] is True
    assert leases[-1].payload["worker"] != leases[0].payload["worker"]
    # nothing doubled. A step is handed out again only after recovery interrupted it: the dead node
    # had journalled its intent without reaching its tool (the kill waited for no key to be in
    # progress), or a survivor's lease lapsed while the machine was loaded (5 s leases, every
    # agent call on one web node) and the reaper fenced it. Each re-execution is one
    # `step_interrupted` in the run's chain, so none happened unjournalled; the effects stay one
    # ticket, one email row and one SMTP message a customer.
    interruptions = Counter(
        (run_id, payload["index"])
        for run_id, payload in Event.objects.filter(
            run_id__in=run_ids, type=EventType.STEP_INTERRUPTED
        ).values_list("run_id", "payload")
    )
    handed_out_again = list(Step.objects.filter(run_id__in=run_ids, executions__gt=1))
    for step in handed_out_again:
        lapsed = Event.objects.filter(run_id=step.run_id, type=EventType.LEASE_EXPIRED)
        print(
            f"{step.name} #{step.index} of run {step.run_id} handed out {step.executions} times;"
            f" held by the dead node: {step.run_id in held_by_the_dead_node};"
            f" lapsed leases: {list(lapsed.values_list('payload', flat=True))}"
        )
    executions = {(step.run_id, step.index): step.executions - 1 for step in handed_out_again}
    assert executions == dict(interruptions)
    assert (after["tickets"], after["emails"], after["smtp_messages"]) == (RUNS, RUNS, RUNS)
    for customer in customers:
        assert Ticket.objects.filter(customer=customer).count() == 1
        assert OutboundEmail.objects.filter(to=customer).count() == 1
        assert len(smtp_sink.to(customer)) == 1
