"""What each framework integration adds per step over the bare framework, and what the MCP proxy
adds per `tools/call` over a direct stdio call.

    BENCH_TREE=worktree python -m bench.integrations [--runs 7] [--tools 10]

Starts gunicorn on its own database (`bench_integrations`, migrated here), the way
`python -m bench` does, and needs the framework extras installed. Each framework runs the same
scripted agent (an offline model that asks for `--tools` write-tool calls, one per response, then
answers: 2 x tools + 1 steps) bare and journalled, alternately; the figure is the p50 over the
runs of (journalled - bare) / steps, timed inside the run's `with` block (the run's create,
lease and complete are reported apart). The MCP part calls a read and a write tool of the test
suite's upstream server directly and through `intentledger mcp proxy`; the figure is the
difference of the per-call p50s. Results are printed and written to bench/.work/integrations.json.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("BENCH_DB", "bench_integrations")
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench import stack
from bench.common import ROOT, WORK

Case = tuple[Callable[[], Any], Callable[[Any], Any]]  # (bare run, journalled run given a Run)


def pydantic_ai_case(tools: int) -> Case:
    from intentledger.integrations.pydantic_ai import LedgerDurability
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def scripted(messages: list[Any], info: Any) -> ModelResponse:
        done = sum(1 for m in messages if m.kind == "response")
        if done < tools:
            return ModelResponse(parts=[ToolCallPart("noop", {"i": done})])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(scripted))

    @agent.tool_plain
    def noop(i: int) -> str:
        return f"ok {i}"

    return (
        lambda: agent.run_sync("go"),
        lambda run: agent.run_sync("go", capabilities=[LedgerDurability(run)]),
    )


def openai_agents_case(tools: int) -> Case:
    from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool
    from intentledger.integrations.openai_agents import journalled
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    class Scripted(Model):  # type: ignore[misc]
        async def get_response(
            self, system_instructions: Any, input: Any, *a: Any, **k: Any
        ) -> Any:
            done = sum(
                1 for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"
            )
            usage = Usage(requests=1, input_tokens=10, output_tokens=1, total_tokens=11)
            if done < tools:
                call = ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"c{done}",
                    name="noop",
                    arguments=json.dumps({"i": done}),
                    status="completed",
                )
                return ModelResponse(output=[call], usage=usage, response_id=None)
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            message = ResponseOutputMessage(
                type="message", id="m", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[message], usage=usage, response_id=None)

        def stream_response(self, *a: Any, **k: Any) -> Any:
            raise NotImplementedError

    @function_tool
    def noop(i: int) -> str:
        return f"ok {i}"

    agent = Agent(name="bench", model=Scripted(), tools=[noop])
    return (
        lambda: Runner.run_sync(agent, "go", max_turns=tools + 5),
        lambda run: Runner.run_sync(journalled(agent, run), "go", max_turns=tools + 5),
    )


def langgraph_case(tools: int) -> Case:
    from intentledger.integrations.langgraph import journalled_model, journalled_tool_node
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    class Scripted(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def _generate(
            self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            done = sum(1 for m in messages if isinstance(m, ToolMessage))
            usage = {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11}
            if done < tools:
                call = {"name": "noop", "args": {"i": done}, "id": f"c{done}", "type": "tool_call"}
                message = AIMessage(content="", tool_calls=[call], usage_metadata=usage)
            else:
                message = AIMessage(content="done", usage_metadata=usage)
            return ChatResult(generations=[ChatGeneration(message=message)])

    @tool
    def noop(i: int) -> str:
        """Do nothing."""
        return f"ok {i}"

    def build(model: Any, tool_node: Any) -> Any:
        graph = StateGraph(MessagesState)
        graph.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
        graph.add_node("tools", tool_node)
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", tools_condition)
        graph.add_edge("tools", "model")
        return graph.compile()

    bare = build(Scripted(), ToolNode([noop]))
    durable = build(journalled_model(Scripted()), journalled_tool_node([noop]))
    start = {"messages": [("user", "go")]}
    return (lambda: bare.invoke(start), lambda run: durable.invoke(start))


def measure(name: str, case: Case, *, ledger: Any, runs: int, steps: int) -> dict[str, Any]:
    bare, durable = case
    per_step: list[float] = []
    fixed: list[float] = []
    bare_ms: list[float] = []
    for attempt in range(runs + 1):  # the first pair warms up
        t0 = time.perf_counter()
        bare()
        bare_run = (time.perf_counter() - t0) * 1000
        t_enter = time.perf_counter()
        with ledger.run(f"bench-{name}", {}, external_id=f"{name}-{uuid.uuid4().hex}") as run:
            t0 = time.perf_counter()
            durable(run)
            durable_run = (time.perf_counter() - t0) * 1000
            run.output = "done"
            assert run.next_index == steps, (name, run.next_index, steps)
        whole = (time.perf_counter() - t_enter) * 1000
        if attempt:
            bare_ms.append(bare_run)
            per_step.append((durable_run - bare_run) / steps)
            fixed.append(whole - durable_run)
    return {
        "framework": name,
        "steps_per_run": steps,
        "bare_run_ms_p50": round(statistics.median(bare_ms), 2),
        "overhead_per_step_ms_p50": round(statistics.median(per_step), 2),
        "overhead_per_step_ms_min_max": [round(min(per_step), 2), round(max(per_step), 2)],
        "run_create_lease_complete_ms_p50": round(statistics.median(fixed), 2),
    }


async def mcp_calls(params: Any, calls: int) -> dict[str, list[float]]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    times: dict[str, list[float]] = {"lookup": [], "append": []}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        for i in range(calls + 2):  # two warm-up pairs
            for name, arguments in (
                ("lookup", {"ticket": f"T-{i}"}),
                ("append", {"line": f"l{i}"}),
            ):
                t0 = time.perf_counter()
                result = await session.call_tool(name, arguments)
                assert not result.is_error, result
                if i >= 2:
                    times[name].append((time.perf_counter() - t0) * 1000)
    return times


def measure_mcp(url: str, token: str, calls: int) -> dict[str, Any]:
    from mcp.client.stdio import StdioServerParameters

    upstream = ROOT / "tests" / "integrations" / "mcp_upstream.py"
    work = tempfile.mkdtemp(prefix="bench-mcp-")
    env = {"WORK_DIR": work, "PYTHONPATH": str(ROOT)}
    direct = StdioServerParameters(command=sys.executable, args=[str(upstream)], env=env)
    proxied = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "intentledger",
            "mcp",
            "proxy",
            "--upstream",
            f"{sys.executable} {upstream}",
            "--agent",
            "bench-mcp",
            "--run",
            f"mcp-{uuid.uuid4().hex}",
        ],
        env={**env, "INTENTLEDGER_URL": url, "INTENTLEDGER_TOKEN": token},
        cwd=ROOT,
    )
    plain = asyncio.run(mcp_calls(direct, calls))
    through = asyncio.run(mcp_calls(proxied, calls))
    out: dict[str, Any] = {"calls": calls}
    for name, kind in (("lookup", "read"), ("append", "write")):
        d, p = statistics.median(plain[name]), statistics.median(through[name])
        out[f"{kind}_direct_ms_p50"] = round(d, 2)
        out[f"{kind}_proxied_ms_p50"] = round(p, 2)
        out[f"{kind}_overhead_ms_p50"] = round(p - d, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.integrations", description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tools", type=int, default=10, help="tool calls per run")
    parser.add_argument("--mcp-calls", type=int, default=30)
    args = parser.parse_args(argv)
    steps = 2 * args.tools + 1

    from intentledger import Ledger

    stack.migrate_bench_db()
    token = stack.worker_token()
    for name in ("pydantic_ai", "openai_agents", "langgraph", "mcp"):
        stack.ensure_policy(f"bench-{name}", max_steps=10_000, max_recoveries=100)
    results: dict[str, Any] = {"frameworks": [], "mcp": None}
    try:
        with stack.gunicorn(workers=2, threads=4) as (url, _proc), Ledger(url, token) as ledger:
            for name, build in (
                ("pydantic_ai", pydantic_ai_case),
                ("openai_agents", openai_agents_case),
                ("langgraph", langgraph_case),
            ):
                try:
                    case = build(args.tools)
                except ImportError as missing:
                    print(f"{name}: skipped ({missing})")
                    continue
                figure = measure(name, case, ledger=ledger, runs=args.runs, steps=steps)
                results["frameworks"].append(figure)
                print(json.dumps(figure))
            results["mcp"] = measure_mcp(url, token, args.mcp_calls)
            print(json.dumps(results["mcp"]))
    finally:
        stack.stop_all()
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "integrations.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
