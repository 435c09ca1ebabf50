"""The support agent's CLI and its models: scripted, and any OpenAI-compatible endpoint."""

import http.server
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from runs.models import Run, Step
from support_agent.llm import ModelError, OpenAIChatModel, ScriptedModel
from tests.conftest import ROOT
from tests.support_agent.conftest import AgentDesk, effects_for
from tests.support_agent.ports import port_in_range


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "support_agent.support", *args],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_names_every_option() -> None:
    out = cli("--help")
    assert out.returncode == 0
    for option in (
        "--ticket",
        "--run-id",
        "--model",
        "--worker",
        "--wait-lease",
        "INTENTLEDGER_URL",
    ):
        assert option in out.stdout


def test_an_unknown_ticket_without_its_details_is_refused_before_any_call() -> None:
    out = cli(
        "--ticket",
        "T-9999",
        env={"INTENTLEDGER_URL": "http://127.0.0.1:8297", "INTENTLEDGER_TOKEN": "x"},
    )
    assert out.returncode == 2
    assert "not in the demo inbox" in out.stderr and "--customer" in out.stderr


def test_without_a_ledger_url_it_says_so() -> None:
    out = cli("--ticket", "T-1001")
    assert out.returncode == 2
    assert "INTENTLEDGER_URL" in out.stderr


def test_an_unreachable_ledger_is_reported_clearly() -> None:
    out = cli(
        "--ticket",
        "T-1001",
        env={"INTENTLEDGER_URL": "http://127.0.0.1:8297", "INTENTLEDGER_TOKEN": "x"},
    )
    assert out.returncode == 1
    assert "unreachable" in out.stderr and "8297" in out.stderr


def test_scripted_model_is_deterministic_and_counts_tokens() -> None:
    messages = [
        {"role": "system", "content": "Triage: classify"},
        {"role": "user", "content": "a b c"},
    ]
    first, second = ScriptedModel().complete(messages), ScriptedModel().complete(messages)
    assert first == second
    assert first.input_tokens == 2 + 4 + 3 + 4
    assert first.output_tokens == len(first.content.split()) > 0
    other = ScriptedModel().complete([*messages[:1], {"role": "user", "content": "a b d"}])
    assert other.content != first.content


class ChatCompletions(http.server.BaseHTTPRequestHandler):
    """A local OpenAI-compatible endpoint: records requests, answers with fixed usage."""

    requests: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append({"path": self.path, "auth": self.headers["Authorization"], **body})
        if self.path != "/v1/chat/completions":
            self.send_response(404)
            self.end_headers()
            return
        answer = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"reply {len(body['messages'])}"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def chat_server() -> Iterator[str]:
    ChatCompletions.requests = []
    port = port_in_range()  # a free port from the OS
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), ChatCompletions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_openai_adapter_speaks_chat_completions(chat_server: str) -> None:
    model = OpenAIChatModel(base_url=chat_server, model="local-test", api_key="sk-test")
    reply = model.complete([{"role": "user", "content": "hi"}])
    assert (reply.content, reply.input_tokens, reply.output_tokens) == ("reply 1", 7, 3)
    assert ChatCompletions.requests[0]["auth"] == "Bearer sk-test"
    assert ChatCompletions.requests[0]["temperature"] == 0
    broken = OpenAIChatModel(base_url=chat_server.replace("/v1", "/nope"), model="m")
    with pytest.raises(ModelError, match="404"):
        broken.complete([{"role": "user", "content": "hi"}])


@pytest.mark.slow
def test_agent_on_an_openai_compatible_endpoint_resumes_without_calling_the_model_again(
    desk: AgentDesk, chat_server: str
) -> None:
    desk.env.update(
        {
            "AGENT_OPENAI_BASE_URL": chat_server,
            "AGENT_OPENAI_MODEL": "local-test",
            "AGENT_OPENAI_API_KEY": "sk-test",
        }
    )
    ticket, customer = desk.new_ticket()
    killed = desk.run(ticket, customer, args="--model openai", AGENT_CRASH_AFTER_STEP="12")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    calls_before_crash = len(ChatCompletions.requests)
    assert calls_before_crash == 8  # model steps 0, 2, 5, 6, 7, 9, 10, 12

    resumed = desk.run(ticket, customer, args="--model openai")
    assert resumed.returncode == 0, resumed.stderr
    run = Run.objects.get(external_id=f"ticket:{ticket}")
    model_steps = Step.objects.filter(run=run, kind="model")
    # 12 model steps, each called once: the replayed 8 were not asked again
    assert model_steps.count() == 12 == len(ChatCompletions.requests)
    assert {r["model"] for r in ChatCompletions.requests} == {"local-test"}
    assert run.used_tokens == 12 * 10
    first_reply = model_steps.get(index=0).result
    assert first_reply is not None and first_reply["content"] == "reply 2"
    assert effects_for(desk, customer) == (1, 1, 1)
