"""The README's SDK example (and docs/sdk.md's, the same) is real code: run it against the ledger
and check what it did."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from config.celery import app as celery_app
from runs.models import Event, Run
from runs.services.enforcement import runs_redispatch_idle
from tests.conftest import ROOT, chain_problems
from tests.doc_examples import Block, doc_example
from tests.support_agent.conftest import AgentDesk, effects_for
from tests.support_agent.fixtures import reaped_once_the_lease_lapses

pytestmark = pytest.mark.slow


# the front page's example, and the SDK page's (the same example, where the manual starts)
README_EXAMPLE = doc_example("README.md", "## Using the worker SDK")
SDK_PAGE_EXAMPLE = doc_example("docs/sdk.md", "# Using the worker SDK")


@pytest.mark.parametrize("example", [README_EXAMPLE, SDK_PAGE_EXAMPLE], ids=lambda b: b.doc)
def test_readme_sdk_example_runs_once_even_when_run_twice(desk: AgentDesk, example: Block) -> None:
    assert len(example.code.strip().splitlines()) <= 22
    mailed_before = len(
        desk.smtp.to("ada@example.com")
    )  # the sink outlives a test: the other page's
    code = compile(example.code.replace("http://ledger:8000", desk.url), example.doc, "exec")
    exec(code, {"token": desk.token})  # noqa: S102
    run = Run.objects.get(agent="support", external_id="ticket-42")
    assert run.status == "completed"
    assert effects_for(desk, "ada@example.com") == (1, 1, 1 + mailed_before)

    # run again (an orchestrator retry): it attaches to the finished run and stops cleanly
    exec(code, {"token": desk.token})  # noqa: S102
    assert Run.objects.filter(agent="support", external_id="ticket-42").count() == 1
    assert effects_for(desk, "ada@example.com") == (1, 1, 1 + mailed_before)


# The README example in a process of its own, with two hooks a test needs: a SIGKILL right after
# the step named KILL_AFTER is journalled (not on replay), and a 5 s lease (so it expires soon).
HARNESS = """
import os, signal, sys
import intentledger._ledger as _ledger
import intentledger._run as _run

kill_after = os.environ.get("KILL_AFTER")
notify = _run.Run._notify

def notify_then_die(self, step, *, replayed):
    notify(self, step, replayed=replayed)
    if kill_after and step["name"] == kill_after and not replayed:
        os.kill(os.getpid(), signal.SIGKILL)

_run.Run._notify = notify_then_die
run = _ledger.Ledger.run
_ledger.Ledger.run = lambda self, *a, **k: run(self, *a, **{**k, "ttl_seconds": 5})
code = open(sys.argv[1]).read()
exec(compile(code, "README.md", "exec"), {"token": os.environ["INTENTLEDGER_TOKEN"]})
"""


def test_readme_example_killed_after_tickets_create_resumes_and_is_never_taken_over(
    desk: AgentDesk,
    start_worker: Callable[..., Any],
    celery_on_db2: None,
    tmp_path: Path,
) -> None:
    """The demo's Celery worker runs the registered `support` agent. The README example is a run
    of agent `support` too, but its own process runs it (runner `external`): the reaper
    interrupts it when its lease lapses and offers it to nobody; its restart completes it."""
    _worker, celery_log = start_worker()
    _, customer = desk.new_ticket()
    external_id = f"readme-{customer}"
    code = README_EXAMPLE.code.replace("http://ledger:8000", desk.url)
    code = code.replace("ticket-42", external_id).replace("ada@example.com", customer)
    (tmp_path / "example.py").write_text(code)
    (tmp_path / "harness.py").write_text(HARNESS)
    env = {**os.environ, "INTENTLEDGER_TOKEN": desk.token}

    def example(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(tmp_path / "harness.py"), str(tmp_path / "example.py")],
            cwd=ROOT,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
        )

    killed = example(KILL_AFTER="tickets.create")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    run = Run.objects.get(agent="support", external_id=external_id)
    assert (run.runner, run.status, run.lease_worker) == ("external", "running", "pod-7")
    assert effects_for(desk, customer) == (1, 0, 0)

    # beat's reaper, run until the 5 s lease has lapsed, and the idle sweep
    reaped_once_the_lease_lapses()
    assert Run.objects.get(pk=run.pk).status == "interrupted"
    runs_redispatch_idle(idle_seconds=0)
    # anything the sweep offered the worker (one pool process, prefetch 1, a FIFO queue) ran
    # before a task queued after it has finished
    probe = celery_app.send_task("celery.accumulate", args=("probe",))
    deadline = time.monotonic() + 30
    while f"celery.accumulate[{probe.id}] succeeded" not in celery_log.read_text():
        assert time.monotonic() < deadline, "the worker never ran the probe task"
        time.sleep(0.1)
    run.refresh_from_db()
    assert run.status == "interrupted"
    assert str(run.pk) not in celery_log.read_text()

    resumed = example()
    assert resumed.returncode == 0, resumed.stderr
    run.refresh_from_db()
    assert run.status == "completed"
    assert isinstance(run.output, dict) and set(run.output) == {"ticket"}
    assert effects_for(desk, customer) == (1, 1, 1)
    leases = Event.objects.filter(run=run, type="lease_acquired").values_list(
        "payload__worker", flat=True
    )
    assert set(leases) == {"pod-7"}  # never a celery:<node> worker
    assert chain_problems(run.pk) == []
