"""What each framework integration adds per step over the bare framework, and what the MCP proxy
adds per `tools/call` over a direct stdio call, each beside a bare SDK step of the same run.

    BENCH_TREE=worktree python -m bench.integrations [--runs 7] [--tools 10]
        [--enforced-by tool nobody]

Starts the web server (`python -m config.serve`) on its own database (`bench_integrations`, migrated here), the way
`python -m bench` does, and needs the framework extras installed. Each framework runs the same
scripted agent (an offline model that asks for `--tools` write-tool calls, one per response, then
answers: 2 x tools + 1 steps) bare and journalled, alternately; the figure is the p50 over the
runs of (journalled - bare) / steps, timed inside the run's `with` block (the run's create,
lease and complete are reported apart). After each pair, the same steps made with the bare SDK
(`run.model(...)` read steps and `run.tool(...)` write steps with the `enforced_by` the
framework's tool is marked with, through the same HttpTransport to the same server) give the
bare SDK step the overhead is divided by; each `--enforced-by` mark is a row of its own, and the
journal calls of both are counted to show they are the same calls. The MCP part calls a read
and a write tool of the test suite's upstream server directly and through `intentledger mcp
proxy`; the figure is the difference of the per-call p50s, divided by a bare SDK read or write
step measured right after. Writes bench/INTEGRATIONS.md and bench/INTEGRATIONS.json (`--out`).
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
from pathlib import Path
from typing import Any

from bench import stack
from bench.common import BENCH, ROOT, git_revision, machine_description

Case = tuple[Callable[[], Any], Callable[[Any], Any]]  # (bare run, journalled run given a Run)


def pydantic_ai_case(tools: int, enforced_by: str) -> Case:
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

    @agent.tool_plain(metadata={"enforced_by": enforced_by})
    def noop(i: int) -> str:
        return f"ok {i}"

    return (
        lambda: agent.run_sync("go"),
        lambda run: agent.run_sync("go", capabilities=[LedgerDurability(run)]),
    )


def openai_agents_case(tools: int, enforced_by: str) -> Case:
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
        lambda run: Runner.run_sync(
            journalled(agent, run, enforced_by={"noop": enforced_by}),  # type: ignore[dict-item]
            "go",
            max_turns=tools + 5,
        ),
    )


def langgraph_case(tools: int, enforced_by: str) -> Case:
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

    noop.metadata = {"enforced_by": enforced_by}  # LangChain's tool metadata says what it is

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


def bare_sdk_steps(
    ledger: Any, *, reads: int, writes: int, enforced_by: str
) -> dict[str, list[float]]:
    """Per-step times (ms) of the bare SDK doing what a journalled agent run does: `reads` model
    steps (read, one call) and `writes` tool steps (write, `enforced_by` as the framework's tool
    is marked: "tool" holds the outcome for the next step's call, "nobody" sends it at once),
    alternately, in one run of its own."""

    def model(**_: Any) -> dict[str, Any]:
        return {"text": "done", "usage": {"input_tokens": 10, "output_tokens": 1}}

    def noop(i: int, idempotency_key: str) -> str:
        return f"ok {i}"

    times: dict[str, list[float]] = {"read": [], "write": []}
    with ledger.run("bench-sdk", {}, external_id=f"sdk-{uuid.uuid4().hex}") as run:
        for i in range(max(reads, writes)):
            if i < reads:
                t0 = time.perf_counter()
                run.model(model, name="model:scripted", model="scripted", messages=i)
                times["read"].append((time.perf_counter() - t0) * 1000)
            if i < writes:
                t0 = time.perf_counter()
                run.tool("noop", {"i": i}, fn=noop, enforced_by=enforced_by)
                times["write"].append((time.perf_counter() - t0) * 1000)
        run.output = "done"
    return times


class StepCalls:
    """Counts the journal calls (step intents and outcomes) the ledger's HttpTransport sends, so
    the file shows that the journalled run and the bare SDK mix make the same calls."""

    def __init__(self, ledger: Any) -> None:
        self.count = 0
        transport = ledger._transport
        send = transport.request

        def counted(method: str, path: str, **options: Any) -> Any:
            if path.endswith(("/steps/", "/outcome")):
                self.count += 1
            return send(method, path, **options)

        transport.request = counted


def measure(
    name: str,
    case: Case,
    *,
    ledger: Any,
    calls: StepCalls,
    enforced_by: str,
    runs: int,
    tools: int,
    steps: int,
) -> dict[str, Any]:
    bare, durable = case
    per_step: list[float] = []
    fixed: list[float] = []
    bare_ms: list[float] = []
    sdk_mix: list[float] = []  # the bare SDK's time per step for the same reads and writes
    sdk: dict[str, list[float]] = {"read": [], "write": []}
    reads = steps - tools  # model responses are read steps, tool calls write steps
    journalled_calls = mix_calls = 0
    for attempt in range(runs + 1):  # the first round warms up
        t0 = time.perf_counter()
        bare()
        bare_run = (time.perf_counter() - t0) * 1000
        t_enter = time.perf_counter()
        with ledger.run(f"bench-{name}", {}, external_id=f"{name}-{uuid.uuid4().hex}") as run:
            before = calls.count
            t0 = time.perf_counter()
            durable(run)
            durable_run = (time.perf_counter() - t0) * 1000
            journalled_calls = calls.count - before
            run.output = "done"
            assert run.next_index == steps, (name, run.next_index, steps)
        whole = (time.perf_counter() - t_enter) * 1000
        before = calls.count
        sdk_steps = bare_sdk_steps(ledger, reads=reads, writes=tools, enforced_by=enforced_by)
        mix_calls = calls.count - before
        if attempt:
            bare_ms.append(bare_run)
            per_step.append((durable_run - bare_run) / steps)
            fixed.append(whole - durable_run)
            sdk_mix.append((sum(sdk_steps["read"]) + sum(sdk_steps["write"])) / steps)
            for kind in sdk:
                sdk[kind].extend(sdk_steps[kind])
    overhead, mix = statistics.median(per_step), statistics.median(sdk_mix)
    return {
        "framework": name,
        "enforced_by": enforced_by,
        "steps_per_run": steps,
        "reads_per_run": reads,
        "writes_per_run": tools,
        "step_calls_per_run": journalled_calls,
        "sdk_step_calls_per_run": mix_calls,
        "bare_run_ms_p50": round(statistics.median(bare_ms), 2),
        "overhead_per_step_ms_p50": round(overhead, 2),
        "overhead_per_step_ms_min_max": [round(min(per_step), 2), round(max(per_step), 2)],
        "run_create_lease_complete_ms_p50": round(statistics.median(fixed), 2),
        "sdk_read_step_ms_p50": round(statistics.median(sdk["read"]), 2),
        "sdk_write_step_ms_p50": round(statistics.median(sdk["write"]), 2),
        "sdk_step_same_mix_ms_p50": round(mix, 2),
        "overhead_per_sdk_step": round(overhead / mix, 2),
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


def measure_mcp(url: str, token: str, calls: int, ledger: Any) -> dict[str, Any]:
    from mcp.client.stdio import StdioServerParameters

    upstream = ROOT / "tests" / "integrations" / "mcp_upstream.py"
    work = tempfile.mkdtemp(prefix="bench-mcp-")
    # this tree's SDK, whichever one the interpreter has installed
    env = {"WORK_DIR": work, "PYTHONPATH": os.pathsep.join([str(ROOT / "sdk" / "src"), str(ROOT)])}
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
    # the proxy journals `append` (no read-only hint, not --keyed) as a write enforced by nobody
    bare_sdk_steps(ledger, reads=3, writes=3, enforced_by="nobody")  # warm-up
    sdk = bare_sdk_steps(ledger, reads=calls, writes=calls, enforced_by="nobody")
    out: dict[str, Any] = {"calls": calls}
    for name, kind in (("lookup", "read"), ("append", "write")):
        d, p = statistics.median(plain[name]), statistics.median(through[name])
        step = statistics.median(sdk[kind])
        out[f"{kind}_direct_ms_p50"] = round(d, 2)
        out[f"{kind}_proxied_ms_p50"] = round(p, 2)
        out[f"{kind}_overhead_ms_p50"] = round(p - d, 2)
        out[f"sdk_{kind}_step_ms_p50"] = round(step, 2)
        out[f"{kind}_overhead_per_sdk_step"] = round((p - d) / step, 2)
    return out


TARGET = 1.2  # overhead per step (per call) at most this many bare SDK steps


def report(results: dict[str, Any], argv: list[str]) -> str:
    """bench/INTEGRATIONS.md: the figures of one invocation, with what produced them."""
    machine = results["machine"]
    lines = [
        "# Framework integrations and the MCP proxy: what they cost",
        "",
        f"Generated {results['generated_at']} UTC by "
        f"`python -m bench.integrations{''.join(' ' + a for a in argv)}` in "
        f"{results['elapsed_seconds']} s, serving {results['served']} (commit "
        f"{results['commit']}). Machine: {machine['cpu']} x {machine['cores']} cores shared with "
        f"other work (load average at start {machine['loadavg_at_start']}, at the end "
        f"{results['loadavg_at_end']}); the web server (granian, 2 workers x 4 threads) and PostgreSQL on the "
        "same cores. Reproduce: `BENCH_DB=bench_integrations BENCH_TREE=worktree "
        ".venv/bin/python -m bench.integrations` (the framework extras installed).",
        "",
        "Each framework runs the same scripted agent (an offline model asking for one write tool "
        "per response, then answering) bare and journalled, alternately; **overhead per step** "
        "is the p50 over the runs of (journalled - bare) / steps, timed inside the run's `with` "
        "block. After each pair the bare SDK makes the same steps the integration journals, in "
        "a run of its own through the same HttpTransport to the same server: model responses as "
        "`run.model` read steps (one call each) and tool calls as `run.tool` write steps with the "
        "`enforced_by` the framework's tool is marked with. A write enforced by the tool (its "
        "metadata says it honours `step_key()`) is one call in both, its outcome carried by the "
        "next step's call; a write enforced by nobody (an unmarked tool) is two, intent and "
        "outcome. **bare SDK step** is the bare SDK's time per step for that mix, **ratio** the "
        f"overhead divided by it (target <= {TARGET}); **step calls** counts the journal calls "
        "(step intents and outcomes) each made in the last round, which must agree for the "
        "ratio to compare like with like. What the overhead is beyond the same calls: in the "
        "async frameworks (PydanticAI, OpenAI Agents) the synchronous SDK's calls run in a worker "
        "thread, so a model step (and a PydanticAI read tool) is one hop there and back and a "
        "write tool two (it journals its intent in the worker, runs the framework's tool back "
        "on the loop, then finishes the step in the worker); each hop waits for a thread to be "
        "scheduled on cores the server shares. LangGraph's sync graph journals in the thread "
        "that runs the node: no hop. The MCP part calls the test suite's upstream server "
        "(`tests/integrations/mcp_upstream.py`) directly over stdio and through "
        "`intentledger mcp proxy`; the overhead is the difference of the per-call p50s, divided "
        "by a bare SDK read or write step (enforced by nobody, as the proxy journals the "
        "unmarked `append`) measured right after. The machine is shared: read the ratios, "
        "which drift much less than the times.",
        "",
        "| framework | writes enforced by | steps (reads + writes) | step calls per run "
        "(journalled / bare SDK) | bare run p50 | overhead per step p50 (min-max) | bare SDK step, "
        "same mix p50 (read / write) | ratio | met | create + lease + complete p50 |",
        "|---|---|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for f in results["frameworks"]:
        low, high = f["overhead_per_step_ms_min_max"]
        ratio = f["overhead_per_sdk_step"]
        lines.append(
            f"| {f['framework']} | {f['enforced_by']} | {f['steps_per_run']} "
            f"({f['reads_per_run']} + {f['writes_per_run']}) | {f['step_calls_per_run']} / "
            f"{f['sdk_step_calls_per_run']} | {f['bare_run_ms_p50']:.2f} ms | "
            f"{f['overhead_per_step_ms_p50']:.2f} ms ({low:.2f}-{high:.2f}) | "
            f"{f['sdk_step_same_mix_ms_p50']:.2f} ms ({f['sdk_read_step_ms_p50']:.2f} / "
            f"{f['sdk_write_step_ms_p50']:.2f}) | {ratio:.2f} | "
            f"{'yes' if ratio <= TARGET else '**no**'} | "
            f"{f['run_create_lease_complete_ms_p50']:.2f} ms |"
        )
    for skipped in results.get("skipped", []):
        lines.append(f"| {skipped} | | skipped (not installed) | | | | | | | |")
    mcp = results.get("mcp")
    if mcp:
        lines += [
            "",
            f"| MCP `tools/call` ({mcp['calls']} calls) | direct stdio p50 | through the proxy "
            "p50 | overhead p50 | bare SDK step p50 | ratio | met |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for kind, tool in (("read", "`lookup`, `readOnlyHint`"), ("write", "`append`")):
            ratio = mcp[f"{kind}_overhead_per_sdk_step"]
            lines.append(
                f"| {kind} ({tool}) | {mcp[f'{kind}_direct_ms_p50']:.2f} ms | "
                f"{mcp[f'{kind}_proxied_ms_p50']:.2f} ms | {mcp[f'{kind}_overhead_ms_p50']:.2f} ms "
                f"| {mcp[f'sdk_{kind}_step_ms_p50']:.2f} ms | {ratio:.2f} | "
                f"{'yes' if ratio <= TARGET else '**no**'} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.integrations", description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tools", type=int, default=10, help="tool calls per run")
    parser.add_argument(
        "--enforced-by",
        nargs="+",
        choices=("tool", "nobody"),
        default=["tool", "nobody"],
        help="how the scripted agent's write tool is marked (each a row of its own)",
    )
    parser.add_argument("--mcp-calls", type=int, default=30)
    parser.add_argument("--only", nargs="*", help="frameworks (and `mcp`) to measure")
    parser.add_argument("--out", default=str(BENCH / "INTEGRATIONS.md"), help="and .json beside")
    args = parser.parse_args(argv)
    steps = 2 * args.tools + 1
    wanted = set(args.only or ("pydantic_ai", "openai_agents", "langgraph", "mcp"))

    from intentledger import Ledger

    started = time.monotonic()
    results: dict[str, Any] = {
        "machine": machine_description(),
        "commit": git_revision(),
        "frameworks": [],
        "skipped": [],
        "mcp": None,
    }
    stack.migrate_bench_db()
    results["served"] = os.environ.get("BENCH_SERVED_COMMIT", "?")
    token = stack.worker_token()
    for name in ("pydantic_ai", "openai_agents", "langgraph", "mcp", "sdk"):
        stack.ensure_policy(f"bench-{name}", max_steps=10_000, max_recoveries=100)
    try:
        with stack.web_server(workers=2, threads=4) as (url, _proc), Ledger(url, token) as ledger:
            calls = StepCalls(ledger)
            bare_sdk_steps(ledger, reads=5, writes=5, enforced_by="tool")  # the first requests
            for name, build in (
                ("pydantic_ai", pydantic_ai_case),
                ("openai_agents", openai_agents_case),
                ("langgraph", langgraph_case),
            ):
                if name not in wanted:
                    continue
                for enforced_by in args.enforced_by:
                    try:
                        case = build(args.tools, enforced_by)
                    except ImportError as missing:
                        print(f"{name}: skipped ({missing})")
                        results["skipped"].append(name)
                        break
                    figure = measure(
                        name,
                        case,
                        ledger=ledger,
                        calls=calls,
                        enforced_by=enforced_by,
                        runs=args.runs,
                        tools=args.tools,
                        steps=steps,
                    )
                    results["frameworks"].append(figure)
                    print(json.dumps(figure))
            if "mcp" in wanted:
                results["mcp"] = measure_mcp(url, token, args.mcp_calls, ledger)
                print(json.dumps(results["mcp"]))
    finally:
        stack.stop_all()
    results["elapsed_seconds"] = round(time.monotonic() - started, 1)
    results["generated_at"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    results["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    out.write_text(report(results, argv if argv is not None else sys.argv[1:]))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
