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
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runs.models import Run as RunRow
from runs.models import Step
from runs.tokens import worker_token_create
from tests.conftest import ROOT
from tests.integrations.preloaded import PreloadedPython

SIGKILLED = -signal.SIGKILL


@dataclass
class AgentResult:
    returncode: int
    summary: dict[str, Any]
    stderr: str


# what each agent script's framework imports (1-2 s of CPU a process): imported once, in a
# preloaded interpreter the script's processes are forked from (tests/integrations/preloaded.py)
PRELOADS = {
    "openai_agents_agent": [
        "agents",
        "openai.types.responses",
        "intentledger.integrations.openai_agents",
    ],
    "langgraph_agent": [
        "langchain_core.language_models.chat_models",
        "langchain_core.tools",
        "langgraph.graph",
        "intentledger.integrations.langgraph",
    ],
    "pydantic_ai_agent": [
        "pydantic_ai",
        "pydantic_ai.models.function",
        "intentledger.integrations.pydantic_ai",
    ],
    # `python -m intentledger mcp proxy`, which an MCP client starts (through launch.py)
    "intentledger": ["argparse", "intentledger.integrations.mcp"],
    # the proxy tests' upstream server, which the proxy starts (through launch.py): the MCP
    # SDK's server side and its types take 1.5 s of CPU to import
    "mcp_upstream": ["mcp.server", "mcp.server.mcpserver", "mcp_types"],
}
# the ones another program starts, through launch.py and a socket, rather than the test itself
LAUNCHED = frozenset({"intentledger", "mcp_upstream"})


@dataclass
class Desk:
    """Starts one framework's agent script against the ledger, the way a pod would."""

    url: str
    token: str
    workdir: Path
    pythons: dict[str, PreloadedPython]

    def preloaded(self, script: str) -> PreloadedPython:
        """The session's preloaded interpreter for `script`'s framework (started on first use);
        the ones in LAUNCHED (the MCP proxy, its upstream) listen on a socket for launch.py."""
        if script not in self.pythons:
            env = {k: v for k, v in os.environ.items() if not k.startswith("CRASH_")}
            env.update(PYTHONDONTWRITEBYTECODE="1", OPENAI_AGENTS_DISABLE_TRACING="1")
            socket_path = None
            if script in LAUNCHED:  # a short path: a Unix socket's is at most 107 bytes
                socket_path = Path(tempfile.mkdtemp(prefix="al-")) / "preloaded.sock"
            self.pythons[script] = PreloadedPython(
                PRELOADS[script], env=env, cwd=ROOT, socket_path=socket_path
            )
        return self.pythons[script]

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
            INTENTLEDGER_URL=self.desk.url,
            INTENTLEDGER_TOKEN=self.desk.token,
            PYTHONDONTWRITEBYTECODE="1",
            OPENAI_AGENTS_DISABLE_TRACING="1",
            AGENT_NAME=self.agent,
            EXTERNAL_ID=self.external_id,
            WORK_DIR=str(self.work),
            **env,
        )
        path = ROOT / "tests" / "integrations" / f"{script}.py"
        if script in PRELOADS:  # forked from an interpreter that has imported the framework
            target = (
                {"script": str(path)} if by_path else {"module": f"tests.integrations.{script}"}
            )
            returncode, stdout, stderr = self.desk.preloaded(script).run(
                target, env=full_env, cwd=ROOT, work=self.work, timeout=120
            )
        else:
            proc = subprocess.run(
                [sys.executable, str(path)]
                if by_path
                else [sys.executable, "-m", f"tests.integrations.{script}"],
                cwd=ROOT,
                env=full_env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        summary = json.loads(lines[-1]) if lines else {}
        return AgentResult(returncode, summary, stderr)

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


@pytest.fixture(scope="session")
def preloaded_pythons() -> Iterator[dict[str, PreloadedPython]]:
    pythons: dict[str, PreloadedPython] = {}
    yield pythons
    for python in pythons.values():
        python.stop()


@pytest.fixture
def desk(
    ledger_server: str,
    transactional_db: Any,
    tmp_path: Path,
    preloaded_pythons: dict[str, PreloadedPython],
) -> Iterator[Desk]:
    _, token = worker_token_create(name="integrations-test")
    yield Desk(url=ledger_server, token=token, workdir=tmp_path, pythons=preloaded_pythons)


class Crash(BaseException):
    """What SIGKILL would be, in process: nothing after it runs (not even `except Exception`)."""


class McpLines:
    """An MCP server process spoken to line by line (JSON-RPC over stdio), so a test holds its
    pid (to SIGKILL it) and can send what no SDK client would (malformed lines)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**os.environ, **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.next_id = 0
        hello = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        }
        assert "result" in self.request("initialize", hello)
        self.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        return dict(json.loads(self.proc.stdout.readline()))

    def exchange(self, line: str) -> dict[str, Any]:
        self.send(line)
        return self.answer()

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        return self.exchange(json.dumps(message))

    def call(self, name: str, arguments: dict[str, Any], **meta: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if meta:
            params["_meta"] = meta
        return self.request("tools/call", params)

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=30)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
