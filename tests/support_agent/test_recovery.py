"""The story, with real processes: agent workers SIGKILLed at every step, resumed from the journal."""

import os
import signal
import time
from pathlib import Path

import pytest

from runs.models import Event, Run, Step
from tests.support_agent.conftest import AgentDesk, effects_for, support_policy
from tools.models import Ticket

pytestmark = pytest.mark.slow

STEPS = 20  # the support agent's steps: 12 model calls, 8 tools
SIGKILLED = -signal.SIGKILL


def the_run(ticket: str) -> Run:
    return Run.objects.get(agent="support", external_id=f"ticket:{ticket}")


def test_worker_killed_after_step_12_resumes_and_sends_one_email(desk: AgentDesk) -> None:
    # a clean run of the same shape, for the budget of one run
    ref_ticket, ref_customer = desk.new_ticket()
    clean = desk.run(ref_ticket, ref_customer)
    assert clean.returncode == 0, clean.stderr
    reference = the_run(ref_ticket)

    ticket, customer = desk.new_ticket()
    killed = desk.run(ticket, customer, AGENT_CRASH_AFTER_STEP="12")
    assert killed.returncode == SIGKILLED, killed.stderr
    run = the_run(ticket)
    assert run.step_count == 13
    assert set(Step.objects.filter(run=run).values_list("state", flat=True)) == {"done"}
    # the ticket was created (step 8) and the email sent (step 11) before the kill
    assert effects_for(desk, customer) == (1, 1, 1)

    resumed = desk.run(ticket, customer)
    assert resumed.returncode == 0, resumed.stderr
    summary = resumed.summary
    assert summary["status"] == "completed"
    assert summary["recovered"] is True
    assert summary["replayed"] == 13 and summary["executed"] == STEPS - 13
    assert summary["first_executed_step"] == 13

    run.refresh_from_db()
    assert run.status == "completed"
    assert run.step_count == STEPS <= 20
    assert effects_for(desk, customer) == (1, 1, 1)
    assert Ticket.objects.get(customer=customer).status == "closed"
    # the budget shows one run, not two: the replayed steps cost neither steps nor tokens
    assert run.used_steps == reference.used_steps == STEPS
    assert run.used_tokens == reference.used_tokens > 0
    assert run.used_recoveries == 1
    assert Step.objects.filter(run=run, executions__gt=1).count() == 0
    recovery = summary["first_executed_at"] - resumed.started_at
    print(
        f"\nrecovery: new process start -> step 13 executing {recovery * 1000:.0f} ms; "
        f"attach+lease+journal {summary['attach_seconds'] * 1000:.1f} ms, "
        f"the lease+journal call alone {summary['lease_seconds'] * 1000:.1f} ms"
    )


@pytest.mark.parametrize("kill_after", range(STEPS))
def test_kill_after_any_step_never_duplicates_an_effect(desk: AgentDesk, kill_after: int) -> None:
    ticket, customer = desk.new_ticket()
    killed = desk.run(ticket, customer, AGENT_CRASH_AFTER_STEP=str(kill_after))
    assert killed.returncode == SIGKILLED, killed.stderr
    assert the_run(ticket).step_count == kill_after + 1

    resumed = desk.run(ticket, customer)
    run = the_run(ticket)
    assert run.status in ("completed", "needs_review")
    tickets, emails, smtp = effects_for(desk, customer)
    assert tickets <= 1 and emails <= 1 and smtp <= 1
    # killed between steps, nothing was in flight: nothing is unknown, so every run completes
    assert run.status == "completed", resumed.stderr
    assert resumed.returncode == 0
    assert (tickets, emails, smtp) == (1, 1, 1)
    assert resumed.summary["replayed"] == kill_after + 1
    assert run.used_steps == STEPS
    assert not Step.objects.filter(run=run, executions__gt=1).exists()


@pytest.mark.parametrize(
    "tool", ["tickets.create", "email.send", "tickets.comment", "tickets.close"]
)
def test_kill_inside_a_ledger_enforced_tool_finds_the_outcome_the_gateway_recorded(
    desk: AgentDesk, tool: str
) -> None:
    ticket, customer = desk.new_ticket()
    killed = desk.run(ticket, customer, AGENT_CRASH_INSIDE=tool)
    assert killed.returncode == SIGKILLED, killed.stderr
    run = the_run(ticket)
    step = Step.objects.get(run=run, name=tool)
    # the worker died after the gateway answered and before it could journal anything: the
    # gateway recorded the outcome with the key's completion, in the same transaction
    assert step.state == "done"
    assert Event.objects.filter(run=run, type="step_done", payload__index=step.index).exists()

    resumed = desk.run(ticket, customer)
    assert resumed.returncode == 0, resumed.stderr
    step.refresh_from_db()
    # replayed from the journal: the tool never ran again
    assert (step.state, step.executions) == ("done", 1)
    assert not Event.objects.filter(run=run, type="reconciled").exists()
    assert effects_for(desk, customer) == (1, 1, 1)
    assert the_run(ticket).status == "completed"


def test_kill_inside_an_unenforced_email_send_goes_to_review_and_is_never_retried(
    desk: AgentDesk,
) -> None:
    ticket, customer = desk.new_ticket()
    killed = desk.run(
        ticket, customer, AGENT_CRASH_INSIDE="email.send", AGENT_EMAIL_ENFORCED_BY="nobody"
    )
    assert killed.returncode == SIGKILLED, killed.stderr
    assert len(desk.smtp.to(customer)) == 1  # it was sent; the ledger cannot know

    for _attempt in range(2):  # a restarted worker, then another one
        again = desk.run(ticket, customer, AGENT_EMAIL_ENFORCED_BY="nobody")
        assert again.returncode == 3, again.stderr
        assert again.summary["status"] == "needs_review"
    run = the_run(ticket)
    assert run.status == "needs_review"
    step = Step.objects.get(run=run, name="email.send")
    assert (step.state, step.enforced_by, step.executions) == ("unknown", "nobody", 1)
    assert run.step_count == step.index + 1
    assert len(desk.smtp.to(customer)) == 1
    assert Event.objects.filter(run=run, type="step_unknown").count() == 1


def _wait_stopped(pid: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.05)
    raise TimeoutError(f"process {pid} did not stop")


def test_zombie_worker_wakes_after_takeover_and_sends_nothing(desk: AgentDesk) -> None:
    ticket, customer = desk.new_ticket()
    zombie = desk.start(
        ticket, customer, worker="pod-old", args="--ttl 5", AGENT_STOP_BEFORE_STEP="11"
    )
    try:
        _wait_stopped(zombie.pid)  # frozen right before email.send, lease still held
        run = the_run(ticket)
        assert run.lease_worker == "pod-old" and run.step_count == 11
        successor = desk.run(ticket, customer, worker="pod-new", args="--wait-lease 30")
        assert successor.returncode == 0, successor.stderr
        assert effects_for(desk, customer) == (1, 1, 1)
        events = Event.objects.filter(run=run).count()

        os.kill(zombie.pid, signal.SIGCONT)
        _out, err = zombie.communicate(timeout=60)
    finally:
        if zombie.poll() is None:
            zombie.kill()
    assert zombie.returncode == 5, err  # stale lease: stopped cleanly
    assert "stale_epoch" in err
    assert Event.objects.filter(run=run).count() == events
    assert effects_for(desk, customer) == (1, 1, 1)
    run.refresh_from_db()
    assert run.status == "completed" and run.lease_worker is None


def test_crash_loop_stops_at_max_recoveries_and_goes_to_review(desk: AgentDesk) -> None:
    support_policy(max_recoveries=2)
    ticket, customer = desk.new_ticket()
    first = desk.run(ticket, customer, AGENT_CRASH_BEFORE_STEP="13")
    assert first.returncode == SIGKILLED
    spent = Run.objects.get(external_id=f"ticket:{ticket}")
    spent_steps, spent_tokens = spent.used_steps, spent.used_tokens

    codes = []
    for _restart in range(4):
        result = desk.run(ticket, customer, AGENT_CRASH_BEFORE_STEP="13")
        codes.append(result.returncode)
        if result.returncode != SIGKILLED:
            break
    # two recoveries die at step 13 again; the third is refused and the run goes to review
    assert codes == [SIGKILLED, SIGKILLED, 3]
    run = the_run(ticket)
    assert (run.status, run.status_reason) == ("needs_review", "recoveries")
    assert spent_steps == 13
    assert (run.used_steps, run.used_tokens) == (spent_steps, spent_tokens)
    assert run.used_recoveries == 3
    assert effects_for(desk, customer) == (1, 1, 1)
