"""Behind PgBouncer in transaction pooling mode the ledger works as it does on a direct connection.

PgBouncer hands each transaction to whichever server connection is free, so anything kept in a
session (a prepared statement, a SET, a WITH HOLD cursor, a session advisory lock) would break.
Here the web server's 8 threads share 3 server connections while agents journal, use the gateway,
recover from an expired lease, a supervisor browses the dashboard and verify_journal reads every
chain through the pooler.
"""

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection

from runs import clock
from runs.chain import run_chain_breaks
from runs.models import Run, Step
from runs.tokens import worker_token_create
from tests.conftest import ROOT, web_server
from tests.review.factories import user_in
from tests.scale.helpers import PGBOUNCER, log_in, pgbouncer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(PGBOUNCER).exists(), reason="Debian's pgbouncer is not installed"),
]
POOL_SIZE = 3


@pytest.fixture(scope="module")
def pgbouncer_port() -> Iterator[int]:
    """A PgBouncer in transaction pooling mode in front of the test server, on a free port."""
    with pgbouncer(pool_size=POOL_SIZE) as port:
        yield port


@pytest.fixture(scope="module")
def pooled_server(django_db_setup: Any, pgbouncer_port: int) -> Iterator[str]:
    """The web server on the pooler, one for the module (it keeps nothing between requests); the tests
    that use it take `transactional_db`, so what they write is committed."""
    settings = connection.settings_dict
    url = f"postgres://{settings['USER']}@127.0.0.1:{pgbouncer_port}/{settings['NAME']}"
    # plain HTTP on loopback: the session and CSRF cookies may not be Secure-only here
    env = {"DATABASE_URL": url, "DATABASE_POOLER": "pgbouncer", "SECURE_COOKIES": "0"}
    with web_server(env=env, workers=2, threads=4, log_name="pgbouncer-web") as base:
        yield base


def agent_run(base: str, token: str, name: str, failures: list[str]) -> None:
    """One agent: a run of 6 write steps through the gateway and 6 read steps, then complete."""
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as http:
            run = http.post("/api/v1/runs/", json={"agent": "pooled", "external_id": name})
            run_id = run.json()["id"]
            epoch = http.post(f"/api/v1/runs/{run_id}/lease", json={"worker": name}).json()["epoch"]
            for i in range(0, 12, 2):
                arguments = {"customer": f"{name}@example.com", "subject": f"#{i}", "body": "hi"}
                intent = http.post(
                    f"/api/v1/runs/{run_id}/steps/",
                    json={"epoch": epoch, "index": i, "kind": "tool", "name": "tickets.create",
                          "effect": "write", "enforced_by": "ledger", "arguments": arguments},
                )  # fmt: skip
                assert intent.status_code == 201, intent.text
                invoked = http.post(
                    "/api/v1/tools/tickets.create/invoke",
                    json={"arguments": arguments},
                    headers={"Idempotency-Key": intent.json()["idempotency_key"]},
                )
                assert invoked.status_code == 200, invoked.text
                # the gateway recorded the step's outcome with the key; the same one again is 200
                outcome = http.post(
                    f"/api/v1/runs/{run_id}/steps/{i}/outcome",
                    json={"epoch": epoch, "status": "ok", "result": invoked.json()["result"]},
                )
                assert outcome.status_code == 200, outcome.text
                read = http.post(
                    f"/api/v1/runs/{run_id}/steps/",
                    json={"epoch": epoch, "index": i + 1, "kind": "model", "name": "m",
                          "effect": "read", "arguments": {"i": i},
                          "outcome": {"result": {"n": i}, "usage": {"input_tokens": 3}}},
                )  # fmt: skip
                assert read.status_code == 201, read.text
                beat = http.post(f"/api/v1/runs/{run_id}/heartbeat", json={"epoch": epoch})
                assert beat.status_code == 200, beat.text
            done = http.post(f"/api/v1/runs/{run_id}/complete", json={"epoch": epoch, "output": {}})
            assert done.status_code == 200, done.text
    except Exception as exc:  # collected, so every thread's failure is reported
        failures.append(f"{name}: {exc!r}")


def test_eight_agents_journal_and_use_the_gateway_through_three_pooled_connections(
    transactional_db: Any, pooled_server: str
) -> None:
    _, token = worker_token_create(name="pooled")
    failures: list[str] = []
    threads = [
        threading.Thread(target=agent_run, args=(pooled_server, token, f"agent-{n}", failures))
        for n in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert failures == []
    runs = list(Run.objects.filter(agent="pooled"))
    assert [r.status for r in runs] == ["completed"] * 8
    assert Step.objects.filter(run__agent="pooled", state="done").count() == 8 * 12
    assert all(run_chain_breaks(r) == [] for r in runs)


def lease_lapsed(run_id: str, timeout: float = 30) -> None:
    """Return once the run's lease has run out (by the clock the servers on this machine use)."""
    deadline = time.monotonic() + timeout
    while Run.objects.filter(pk=run_id, lease_expires_at__gt=clock.now()).exists():
        assert time.monotonic() < deadline, "the lease never ran out"
        time.sleep(0.1)


def test_recovery_the_dashboard_and_verify_journal_work_through_the_pooler(
    transactional_db: Any, pooled_server: str, pgbouncer_port: int
) -> None:
    _, token = worker_token_create(name="pooled")
    with httpx.Client(base_url=pooled_server, headers={"Authorization": f"Bearer {token}"}) as http:
        run_id = http.post("/api/v1/runs/", json={"agent": "pooled", "input": {}}).json()["id"]
        lease = http.post(f"/api/v1/runs/{run_id}/lease", json={"worker": "w-1", "ttl_seconds": 5})
        epoch = lease.json()["epoch"]
        intent = http.post(
            f"/api/v1/runs/{run_id}/steps/",
            json={"epoch": epoch, "index": 0, "kind": "tool", "name": "email.send",
                  "effect": "write", "enforced_by": "nobody", "arguments": {"to": "a@b.c"}},
        )  # fmt: skip
        assert intent.status_code == 201
        lease_lapsed(run_id)  # the worker "died": its lease runs out
        takeover = http.post(f"/api/v1/runs/{run_id}/lease", json={"worker": "w-2"})
        assert takeover.status_code == 409
        assert takeover.json()["error"]["code"] == "needs_review"
    assert Step.objects.get(run_id=run_id, index=0).state == "unknown"

    supervisor = user_in("supervisors", username="sam")
    supervisor.set_password("correct horse battery")
    supervisor.save()
    with httpx.Client(base_url=pooled_server, follow_redirects=True) as browser:
        log_in(browser, pooled_server, "sam", "correct horse battery")
        for page in ("/", "/queue/", f"/runs/{run_id}/"):
            response = browser.get(page)
            assert response.status_code == 200, (page, response.text[:300])
        assert "email.send" in browser.get("/queue/").text

    settings = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{settings['USER']}@127.0.0.1:{pgbouncer_port}/{settings['NAME']}",
        "DATABASE_POOLER": "pgbouncer",
    }
    verified = subprocess.run(
        [sys.executable, "manage.py", "verify_journal"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
