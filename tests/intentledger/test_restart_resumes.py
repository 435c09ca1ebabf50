"""'Start it again after a crash and it resumes', with the SDK's default worker name.

An agent process is killed (SIGKILL) holding its run's lease; the same agent started again on the
same host resumes at once, without the caller naming the worker and without waiting for the old
lease to lapse. A second process started while the first is alive is still refused (LeaseHeld):
a default name belongs to one live process.
"""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from runs.models import Event
from runs.models import Run as RunRow

pytestmark = pytest.mark.slow

AGENT = textwrap.dedent(
    """
    import sys, time
    from intentledger import Ledger

    ledger = Ledger()                                  # INTENTLEDGER_URL / INTENTLEDGER_TOKEN
    with ledger.run("restart", {"order": "A-1"}, external_id="order-A-1") as run:
        found = run.tool("lookup", {"order": "A-1"}, effect="read", fn=lambda order: {"total": 5})
        print("looked up", found, "replayed" if run.replayed else "executed", flush=True)
        if sys.argv[1] == "hang":
            time.sleep(600)                            # killed here, holding the lease
        run.output = {"refunded": found["total"]}
    print("completed", flush=True)
    """
)


def start(script: Path, mode: str, ledger_server: str, token: str) -> subprocess.Popen[str]:
    env = {**os.environ, "INTENTLEDGER_URL": ledger_server, "INTENTLEDGER_TOKEN": token}
    env.pop("INTENTLEDGER_WORKER", None)
    return subprocess.Popen(
        [sys.executable, str(script), mode],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def holding(agent: subprocess.Popen[str]) -> str:
    """Wait until the agent journalled its first step (it holds the lease from then on)."""
    assert agent.stdout is not None
    line = agent.stdout.readline()
    assert line.startswith("looked up"), (line, agent.stderr.read() if agent.stderr else "")
    return line


def test_an_agent_killed_holding_its_lease_resumes_at_once_when_started_again(
    ledger_server: str, worker_token: str, transactional_db: Any, tmp_path: Path
) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    first = start(script, "hang", ledger_server, worker_token)
    assert "executed" in holding(first)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    run = RunRow.objects.get(agent="restart", external_id="order-A-1")
    assert run.status == "running" and str(run.lease_worker).endswith(f":{first.pid}")

    again = start(script, "finish", ledger_server, worker_token)
    out, err = again.communicate(timeout=20)  # well inside the 30 s lease the dead one left
    assert again.returncode == 0, err
    assert "replayed" in out and "completed" in out
    run.refresh_from_db()
    assert run.status == "completed" and run.output == {"refunded": 5}
    leases = Event.objects.filter(run=run, type="lease_acquired").order_by("seq")
    assert [e.payload["recovery"] for e in leases] == [False, True]
    assert run.steps.get(index=0).executions == 1


def test_a_second_agent_started_while_the_first_lives_is_refused(
    ledger_server: str, worker_token: str, transactional_db: Any, tmp_path: Path
) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    first = start(script, "hang", ledger_server, worker_token)
    try:
        holding(first)
        second = start(script, "finish", ledger_server, worker_token)
        _, err = second.communicate(timeout=20)
        assert second.returncode != 0 and "LeaseHeld" in err
        run = RunRow.objects.get(agent="restart", external_id="order-A-1")
        assert str(run.lease_worker).endswith(f":{first.pid}") and run.status == "running"
    finally:
        first.kill()
        first.wait(10)
