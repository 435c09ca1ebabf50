"""The demo's pod deployment (demo.story.deployment_watch) with a step the ledger enforces: a
support pod whose gateway server is SIGKILLed inside `tickets.create` leaves the step's key
held by an execution that is gone (a stale lock): `unknown`, in review. A supervisor sends it
back for retry on the dashboard ("Retry (same key)"); the run is `external`, so no Celery
worker takes it, and the page says so; the deployment restarts the pod, which re-executes the
step under the same key (the gateway takes the stale key over once) and finishes the run: one
ticket, closed, and one email.
"""

import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from dashboard.roles import SUPERVISORS
from demo.story import POD_LEASE_TTL, Story, deployment_watch
from runs.models import Run, Step
from tests.review.factories import PASSWORD, user_in
from tests.support_agent.fixtures import support_desk_token
from tests.tools.conftest import (  # noqa: F401  (fixtures)
    SmtpRecorder,
    killable_server,
    smtp_server,
)
from tools.models import OutboundEmail, Ticket

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LOCK_TIMEOUT = "2"  # seconds before a held key counts as lost
ROOT = Path(__file__).resolve().parents[2]


def pod_argv(ticket: str, customer: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "support_agent.support",
        "--ticket",
        ticket,
        "--customer",
        customer,
        "--subject",
        "Invoice address is wrong",
        "--body",
        "My invoices still show my old address in Leeds. Please update it to Manchester.",
        "--worker",
        f"pod-{ticket}",
        "--ttl",
        str(POD_LEASE_TTL),
        "--wait-lease",
        "60",
    ]


def pod(argv: list[str], url: str, token: str, log: Path) -> int:
    import subprocess

    env = {"PATH": "/usr/bin:/bin", "INTENTLEDGER_URL": url, "INTENTLEDGER_TOKEN": token}
    with open(log, "w") as out:
        return subprocess.run(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=240, check=False
        ).returncode


def wait_for(what: str, check: Any, timeout: float = 240.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"never: {what}")


def log_in(client: httpx.Client, url: str, username: str) -> None:
    page = client.get(f"{url}/login/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert csrf
    answer = client.post(
        f"{url}/login/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": csrf.group(1)},
        headers={"Referer": f"{url}/login/"},
    )
    assert answer.status_code == 302, answer.text[:500]


def test_a_retry_of_a_ledger_enforced_step_is_run_by_the_restarted_pod_once(
    killable_server: Any,  # noqa: F811
    smtp_server: SmtpRecorder,  # noqa: F811
    tmp_path: Path,
) -> None:
    token = support_desk_token()
    user_in(SUPERVISORS, "sam")
    ticket, customer = "T-9005", "alan-9005@example.com"
    argv = pod_argv(ticket, customer)

    # the pod's gateway server dies inside tickets.create (its key held, the ticket not made)
    crashing, crashing_proc = killable_server(
        GATEWAY_CRASH_AT="inside_tool", TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS=LOCK_TIMEOUT
    )
    assert pod(argv, crashing, token, tmp_path / "pod-1.log") != 0
    crashing_proc.wait(timeout=10)
    run = Run.objects.get(external_id=f"ticket:{ticket}")
    assert run.runner == "external"
    assert Ticket.objects.filter(customer=customer).count() == 0

    # its replacement, on a server that stays, finds the key held by nobody: unknown, review
    # (cookies over plain HTTP: the supervisor logs in to this one)
    url, _ = killable_server(
        TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS=LOCK_TIMEOUT, SECURE_COOKIES="0"
    )
    assert pod(argv, url, token, tmp_path / "pod-2.log") == 3, (tmp_path / "pod-2.log").read_text()
    step = Step.objects.get(run=run, state="unknown")
    assert (step.name, step.enforced_by) == ("tickets.create", "ledger")

    # the supervisor sends it back for retry (same key) on the dashboard
    with httpx.Client(timeout=30) as client:
        log_in(client, url, "sam")
        item = client.get(f"{url}/queue/{run.pk}/{step.index}/")
        assert "Retry (same key)" in item.text
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', item.text)
        assert csrf
        page = client.post(
            f"{url}/queue/{run.pk}/{step.index}/resolve",
            data={
                "action": "retry",
                "note": "the tool never finished: run it again",
                "csrfmiddlewaretoken": csrf.group(1),
            },
            headers={"Referer": f"{url}/queue/{run.pk}/{step.index}/"},
            follow_redirects=True,
        ).text
    said = re.search(r'<span id="resumed-by">([^<]*)</span>', page)
    assert said and said.group(1).startswith(
        f"Nobody in the ledger resumes this run: it is run by its own worker process (pod-{ticket})"
    ), page[:3000]
    assert Run.objects.get(pk=run.pk).lease_worker is None  # nobody took it: no Celery here

    # the pod's deployment restarts it; it runs tickets.create once, under the same key
    story = Story(round_no=0, url=url)
    story.deployed[str(run.pk)] = (
        ticket,
        argv,
        {"PATH": "/usr/bin:/bin", "INTENTLEDGER_URL": url, "INTENTLEDGER_TOKEN": token},
    )
    deployment = threading.Thread(
        target=deployment_watch, args=(story,), kwargs={"poll_seconds": 0.3, "logs": tmp_path}
    )
    deployment.start()
    deployment.join(timeout=300)
    assert not deployment.is_alive()
    run.refresh_from_db()
    assert run.status == "completed", (tmp_path / "pod-T-9005-r1.log").read_text()
    assert list(Ticket.objects.filter(customer=customer).values_list("status", flat=True)) == [
        "closed"
    ]
    assert OutboundEmail.objects.filter(to=customer).count() == 1
    assert sum(1 for m in list(smtp_server.messages) if m["To"] == customer) == 1
    assert Step.objects.get(run=run, index=step.index).state == "done"
