"""Run actions against real agent processes: a web server ledger, the support agent, SMTP, Chromium.

The admin acts in the browser on the same web server the agents talk to.
"""

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from dashboard.roles import ADMINS
from runs.chain import run_chain_breaks
from runs.constants import EventType, RunStatus
from runs.models import Event, Run, Step
from tests.console.browser import shot
from tests.review.browser import signed_in
from tests.review.factories import user_in
from tests.support_agent.conftest import AgentDesk, effects_for
from tools.models import Ticket

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def the_run(ticket: str) -> Run:
    return Run.objects.get(agent="support", external_id=f"ticket:{ticket}")


def wait_until(check: Any, *, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def process_stopped(pid: int) -> bool:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0] == "T"


def test_cancel_stops_a_running_agent_process(desk: AgentDesk, browser: Any) -> None:
    user_in(ADMINS, "ada")
    ticket, customer = desk.new_ticket()
    # the agent freezes (SIGSTOP) before step 5: mid-run, lease held, steps 0-4 journalled
    agent = desk.start(ticket, customer, AGENT_STOP_BEFORE_STEP="5")
    try:
        wait_until(
            lambda: Run.objects.filter(
                agent="support", external_id=f"ticket:{ticket}", step_count=5
            ).exists()
        )
        wait_until(lambda: process_stopped(agent.pid))
        run = the_run(ticket)
        assert run.status == RunStatus.RUNNING and run.lease_worker == "pod-1"

        page = signed_in(browser, desk.url, "ada")
        page.goto(f"{desk.url}/runs/{run.pk}/")
        page.fill("#cancel-note", "Customer closed the ticket by phone.")
        page.click("#cancel-run")
        page.locator("#run-status", has_text="cancelled").wait_for()
        shot(page, "console-cancelled-run")

        os.kill(agent.pid, signal.SIGCONT)
        stdout, stderr = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    summary = json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
    assert agent.returncode == 6, stderr  # "run already finished": a clean stop
    assert summary["status"] == "run_finished", summary
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert run.step_count == 5  # its next write (step 5) was refused: nothing more journalled
    last = Event.objects.filter(run=run).order_by("-seq").first()
    assert last is not None and last.type == EventType.RUN_CANCELLED
    assert effects_for(desk, customer) == (0, 0, 0)  # the ticket would have come at step 8
    assert run_chain_breaks(run) == []


def test_a_fork_of_a_run_stopped_at_step_12_completes_without_a_second_ticket_or_email(
    desk: AgentDesk, browser: Any
) -> None:
    user_in(ADMINS, "ada")
    ticket, customer = desk.new_ticket()
    killed = desk.run(ticket, customer, AGENT_CRASH_AFTER_STEP="12")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    original = the_run(ticket)
    assert original.step_count == 13
    assert effects_for(desk, customer) == (1, 1, 1)  # ticket (step 8) and email (step 11) sent

    page = signed_in(browser, desk.url, "ada")
    page.goto(f"{desk.url}/runs/{original.pk}/")
    page.fill("#cancel-note", "Pod evicted; continue in a fork instead.")
    page.click("#cancel-run")
    page.locator("#run-status", has_text="cancelled").wait_for()
    page.fill("#fork-index", "13")
    page.fill("#fork-note", "What if it had continued after step 12?")
    page.click("#fork-run")
    page.locator("#forked-from").wait_for()
    fork = Run.objects.get(forked_from=original)

    resumed = desk.run(ticket, customer, args=f"--run-id {fork.pk}")

    assert resumed.returncode == 0, resumed.stderr
    assert resumed.summary["status"] == "completed", resumed.summary
    assert resumed.summary["replayed"] == 13
    fork.refresh_from_db()
    assert fork.status == RunStatus.COMPLETED and fork.step_count == 20
    assert effects_for(desk, customer) == (1, 1, 1)  # no second ticket, no second email
    assert Ticket.objects.get(customer=customer).status == "closed"
    copied = Step.objects.filter(run=fork, index__lt=13)
    assert set(copied.values_list("executions", flat=True)) == {0}
    assert Step.objects.filter(run=fork, index__gte=13, executions=1).count() == 7
    original.refresh_from_db()
    assert original.status == RunStatus.CANCELLED
    assert run_chain_breaks(fork) == [] and run_chain_breaks(original) == []
    page.goto(f"{desk.url}/runs/{fork.pk}/")
    assert page.locator("#timeline").get_attribute("data-copied") == "13"
    shot(page, "console-fork-completed")
