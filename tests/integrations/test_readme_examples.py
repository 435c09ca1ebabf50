"""The integration examples of docs/integrations.md are real code: each runs as written against the ledger."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runs.models import Run
from tests.conftest import ROOT
from tests.doc_examples import Block, doc_example

pytestmark = pytest.mark.slow


PAGE = "docs/integrations.md"
PYDANTIC_AI = doc_example(PAGE, "## PydanticAI")
OPENAI_AGENTS = doc_example(PAGE, "## OpenAI Agents SDK")
LANGGRAPH = doc_example(PAGE, "## LangGraph")
MCP_GATEWAY = doc_example(PAGE, "## MCP gateway")


def example_code(example: Block, ledger_server: str) -> str:
    assert len(example.code.strip().splitlines()) <= 24
    return example.code.replace("http://ledger:8000", ledger_server)


def leased_by(run: Run) -> list[str]:
    """The worker names the run's leases went to: a stable one makes a restart resume at once."""
    leases = run.events.filter(type="lease_acquired").order_by("seq")
    return [e.payload["worker"] for e in leases]


def test_pydantic_ai_example(ledger_server: str, worker_token: str, transactional_db: Any) -> None:
    code = example_code(PYDANTIC_AI, ledger_server)
    exec(compile(code, PAGE, "exec"), {"token": worker_token})  # noqa: S102
    run = Run.objects.get(agent="refunds", external_id="order-A-1")
    assert run.status == "completed"
    steps = list(run.steps.order_by("index").values_list("kind", "name", "effect"))
    assert ("tool", "lookup", "read") in steps
    assert ("tool", "refund", "write") in steps
    assert steps[0][0] == "model" and steps[-1][0] == "model"
    assert run.steps.get(name="refund").enforced_by == "nobody"
    assert leased_by(run) == ["pod-1"]


def test_openai_agents_example(
    ledger_server: str, worker_token: str, transactional_db: Any, tmp_path: Path
) -> None:
    # as an agent author runs it, from this checkout's root: no module of ours is called `agents`
    code = example_code(OPENAI_AGENTS, ledger_server)
    example = tmp_path / "example.py"
    example.write_text(f"token = {worker_token!r}\n{code}")
    env = {**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", f"exec(open({str(example)!r}).read())"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    run = Run.objects.get(agent="refunds-openai", external_id="order-A-1")
    assert run.status == "completed" and run.output == "Refunded A-1."
    assert leased_by(run) == ["pod-1"]
    steps = list(run.steps.order_by("index").values_list("kind", "name", "effect"))
    assert steps == [
        ("model", "model:ScriptedModel", "read"),
        ("tool", "lookup", "read"),
        ("model", "model:ScriptedModel", "read"),
        ("tool", "refund", "write"),
        ("model", "model:ScriptedModel", "read"),
    ]


def test_langgraph_example(
    ledger_server: str,
    worker_token: str,
    transactional_db: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.integrations import _agent_kit
    from tests.integrations.langgraph_agent import ScriptedChatModel

    monkeypatch.setattr(_agent_kit, "WORK", tmp_path)  # where it counts model calls

    chat_model = ScriptedChatModel(calls=[("refund", {"order": "A-1"})], answer="Refunded A-1.")
    example = compile(example_code(LANGGRAPH, ledger_server), PAGE, "exec")
    exec(example, {"token": worker_token, "chat_model": chat_model})  # noqa: S102
    run = Run.objects.get(agent="refunds-langgraph", external_id="order-A-1")
    assert run.status == "completed" and run.output == "Refunded A-1."
    assert leased_by(run) == ["pod-1"]
    steps = list(run.steps.order_by("index").values_list("kind", "name", "effect", "enforced_by"))
    assert steps == [
        ("model", "model:ScriptedChatModel", "read", None),
        ("tool", "refund", "write", "nobody"),
        ("model", "model:ScriptedChatModel", "read", None),
    ]


def test_mcp_proxy_example(
    ledger_server: str,
    worker_token: str,
    transactional_db: Any,
    tmp_path: Path,
) -> None:
    code = example_code(MCP_GATEWAY, ledger_server)
    # the console script and the example's upstream server, as this checkout provides them
    upstream = ROOT / "tests" / "integrations" / "mcp_upstream.py"
    code = code.replace("python files_server.py", f"{sys.executable} {upstream}")
    code = code.replace(
        'command="intentledger",\n    args=["mcp",',
        f'command={sys.executable!r}, cwd={str(ROOT)!r},\n    args=["-m", "intentledger", "mcp",',
    )
    code = code.replace(
        'env={"INTENTLEDGER_URL"', f'env={{"WORK_DIR": {str(tmp_path)!r}, "INTENTLEDGER_URL"'
    )
    exec(compile(code, PAGE, "exec"), {"token": worker_token})  # noqa: S102
    run = Run.objects.get(agent="desk", external_id="ticket-42")
    assert run.status == "completed"
    steps = list(run.steps.order_by("index").values_list("name", "effect", "enforced_by"))
    assert steps == [("files/lookup", "read", None), ("files/append", "write", "nobody")]
    assert (tmp_path / "effects.txt").read_text() == "refund T-1\n"
