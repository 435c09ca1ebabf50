"""The OpenAI Agents SDK under the ledger: every model response and tool call a journalled step.

    from agents import Runner
    from intentledger.integrations.openai_agents import journalled

    with ledger.run("support", ticket, external_id="ticket-42") as run:
        result = Runner.run_sync(journalled(agent, run, read={"lookup"}), prompt)
        run.output = result.final_output

`journalled` clones the agent with its model wrapped in `LedgerModel` (each response a read step
of kind `model`; a replay returns the recorded response, with its usage, without calling the model)
and each `FunctionTool` wrapped so that its invocation is a step: a write enforced by nobody,
unless named in `read=` or given `enforced_by={"name": "tool" | "ledger"}` ("tool": it reads
the step's key with `intentledger.integrations.step_key()`; "ledger": its effects are
`current_run().tool(name, arguments)` calls of the ledger's tools, each a step of its own). The SDK runs a response's tool calls
concurrently; the wrapper journals them one at a time in the order the model asked for them, so
a replay sees the same indices. Agents listed in `handoffs` are journalled too (a `Handoff`
object made with `handoff(...)` is not: its agent is not reachable before it is invoked).

The SDK's import name is `agents`. Inside this repository a Django app has that name too: run
SDK agents from a process that does not put the repository root first on `sys.path`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

try:
    from agents import (
        Agent,
        FunctionTool,
        Model,
        ModelResponse,
        Usage,
    )
    from agents.items import TResponseOutputItem
    from agents.models.multi_provider import MultiProvider
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "intentledger.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'intentledger[openai-agents]' (its import name is `agents`; make sure no "
        f"other package of that name shadows it): {exc}"
    ) from exc
from pydantic import TypeAdapter

from intentledger._run import EnforcedBy, Run
from intentledger.integrations import _core

_OUTPUT = TypeAdapter(list[TResponseOutputItem])


def _json_fallback(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else str(value)


class LedgerModel(Model):
    """A `Model` whose responses are journalled steps of `run` (replayed after a crash)."""

    def __init__(self, model: Model, run: Run, *, name: str | None = None) -> None:
        self.model = model
        self.run = run
        self.name = name or getattr(model, "model", None) or type(model).__name__
        self._order = _core.CallOrder()
        self._tools: set[str] = set()  # the journalled tools' names (not handoffs, not hosted)

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        items = [input] if isinstance(input, str) else list(input)
        arguments = {
            "model": str(self.name),
            "items": len(items),
            "conversation": _core.digest(items),  # not the instructions: see `_core.digest`
        }

        def ask() -> Awaitable[ModelResponse]:
            return self.model.get_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )

        def journal(answer: Callable[[], ModelResponse]) -> Any:
            def call(**_: Any) -> dict[str, Any]:
                response = answer()
                return {
                    "output": _OUTPUT.dump_python(response.output, mode="json"),
                    "response_id": response.response_id,
                    "usage": {
                        "input_tokens": response.usage.input_tokens,
                        "output_tokens": response.usage.output_tokens,
                    },
                }

            return self.run.model(call, name=f"model:{self.name}", **arguments)

        recorded = await _core.model_step_from_async(self.run, ask, journal)
        usage = recorded["usage"]
        response = ModelResponse(
            output=_OUTPUT.validate_python(recorded["output"]),
            usage=Usage(
                requests=1,
                input_tokens=usage["input_tokens"],
                output_tokens=usage["output_tokens"],
                total_tokens=usage["input_tokens"] + usage["output_tokens"],
            ),
            response_id=recorded.get("response_id"),
        )
        self._order.expect(
            str(getattr(item, "call_id", ""))
            for item in response.output
            if getattr(item, "type", None) == "function_call"
            and getattr(item, "name", None) in self._tools
        )
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "streamed runs are not journalled yet: use Runner.run or Runner.run_sync"
        )

    async def close(self) -> None:
        await self.model.close()


def journal_function_tool(
    tool: FunctionTool,
    model: LedgerModel,
    *,
    effect: str = "write",
    enforced_by: EnforcedBy | None = "nobody",
) -> FunctionTool:
    """A copy of `tool` whose every invocation is one step of `model.run`."""
    invoke = tool.on_invoke_tool
    model._tools.add(tool.name)

    async def on_invoke_tool(ctx: Any, input_json: str) -> Any:
        call_id = str(getattr(ctx, "tool_call_id", ""))
        parsed = json.loads(input_json or "{}")
        arguments = _core.journalable(
            parsed if isinstance(parsed, dict) else {"input": parsed}, what="arguments"
        )

        def journal(await_on_loop: Callable[[Awaitable[Any]], Any]) -> Any:
            model._order.wait_for(call_id)  # in the worker thread: the loop runs the others
            try:
                return _core.journal_tool(
                    model.run,
                    tool.name,
                    arguments,
                    lambda: await_on_loop(invoke(ctx, input_json)),
                    effect=effect,
                    enforced_by=None if effect == "read" else enforced_by,
                    result_to_json=_json_fallback,
                )
            finally:
                model._order.done(call_id)

        return await _core.journal_from_async(journal)

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


def journalled(
    agent: Agent[Any],
    run: Run,
    *,
    read: Iterable[str] = (),
    enforced_by: Mapping[str, EnforcedBy] | None = None,
    _clones: dict[int, Agent[Any]] | None = None,
) -> Agent[Any]:
    """A clone of `agent` whose model responses and function tool calls are steps of `run`.

    Agents it hands off to (listed as `Agent`s in `handoffs`) are journalled the same way, into
    the same run; `read` and `enforced_by` name tools across all of them.
    """
    clones = {} if _clones is None else _clones
    if id(agent) in clones:  # agents that hand off to each other
        return clones[id(agent)]
    read_tools = set(read)
    enforced = dict(enforced_by or {})
    inner = agent.model
    if not isinstance(inner, Model):
        inner = MultiProvider().get_model(inner)
    model = LedgerModel(inner, run)
    tools: list[Any] = []
    for tool in agent.tools:
        if isinstance(tool, FunctionTool):
            effect = "read" if tool.name in read_tools else "write"
            tool = journal_function_tool(
                tool, model, effect=effect, enforced_by=enforced.get(tool.name, "nobody")
            )
        tools.append(tool)
    clone: Agent[Any] = agent.clone(model=model, tools=tools)
    clones[id(agent)] = clone
    clone.handoffs = [
        journalled(h, run, read=read_tools, enforced_by=enforced, _clones=clones)
        if isinstance(h, Agent)
        else h
        for h in agent.handoffs
    ]
    return clone


__all__ = ["LedgerModel", "journal_function_tool", "journalled"]
