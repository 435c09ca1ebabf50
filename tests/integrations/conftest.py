"""Real processes for the framework integrations: agents we SIGKILL, then start again.

Each agent script (`<framework>_agent.py` here) runs one scripted conversation against the ledger
with the framework's own offline test model, appends each model call to `model_calls.txt` and
each effect of its write tool to `effects.txt` in its work directory, and prints a JSON summary
as its last line. `CRASH_AFTER=<tool>` SIGKILLs it right after that tool's step is journalled,
`CRASH_INSIDE=<tool>` right after the tool's effect, before its outcome is journalled.
"""

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runs.models import BudgetPolicy, Step
from runs.models import Run as RunRow
from runs.tokens import worker_token_create
from tests.conftest import ROOT

SIGKILLED = -signal.SIGKILL


@dataclass
class AgentResult:
    returncode: int
    summary: dict[str, Any]
    stderr: str


@dataclass
class Desk:
    """Starts one framework's agent script against the ledger, the way a pod would."""

    url: str
    token: str
    workdir: Path

    def new_run(self, agent: str) -> "AgentRun":
        tag = uuid.uuid4().hex[:10]
        work = self.workdir / tag
        work.mkdir()
        return AgentRun(desk=self, agent=agent, external_id=f"{agent}-{tag}", work=work)


@dataclass
class AgentRun:
    desk: Desk
    agent: str
    external_id: str
    work: Path

    def start(self, script: str, *, by_path: bool = False, **env: str) -> AgentResult:
        """Run `tests/integrations/<script>.py`; `by_path` keeps the repository root off the
        front of sys.path (the OpenAI Agents SDK and our Django app are both `agents`)."""
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("CRASH_")}
        full_env.update(
            LEDGER_URL=self.desk.url,
            LEDGER_TOKEN=self.desk.token,
            PYTHONDONTWRITEBYTECODE="1",
            OPENAI_AGENTS_DISABLE_TRACING="1",
            AGENT_NAME=self.agent,
            EXTERNAL_ID=self.external_id,
            WORK_DIR=str(self.work),
            **env,
        )
        proc = subprocess.run(
            [sys.executable, str(ROOT / "tests" / "integrations" / f"{script}.py")]
            if by_path
            else [sys.executable, "-m", f"tests.integrations.{script}"],
            cwd=ROOT,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        summary = json.loads(lines[-1]) if lines else {}
        return AgentResult(proc.returncode, summary, proc.stderr)

    @property
    def effects(self) -> list[str]:
        path = self.work / "effects.txt"
        return path.read_text().splitlines() if path.exists() else []

    @property
    def model_calls(self) -> int:
        path = self.work / "model_calls.txt"
        return len(path.read_text().splitlines()) if path.exists() else 0

    @property
    def row(self) -> RunRow:
        return RunRow.objects.get(agent=self.agent, external_id=self.external_id)

    def step(self, name: str) -> Step:
        return Step.objects.get(run=self.row, name=name)


@pytest.fixture
def desk(ledger_server: str, transactional_db: Any, tmp_path: Path) -> Iterator[Desk]:
    _, token = worker_token_create(name="integrations-test")
    yield Desk(url=ledger_server, token=token, workdir=tmp_path)


def policy_for(agent: str, **limits: Any) -> BudgetPolicy:
    values = {
        "max_steps": 20,
        "max_tokens": 100_000,
        "max_wall_seconds": 3600,
        "max_cost_usd": None,
        "max_recoveries": 3,
        **limits,
    }
    policy, _ = BudgetPolicy.objects.update_or_create(
        agent=agent, defaults={"name": f"{agent}-policy", **values}
    )
    return policy
