"""LangGraph under the ledger: model calls and tool calls of a graph as journalled steps.

    from langgraph.graph import END, START, MessagesState, StateGraph
    from intentledger.integrations.langgraph import journalled_model, journalled_tool_node

    model = journalled_model(chat_model.bind_tools(tools))   # each call: a model step
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", journalled_tool_node(tools))     # each tool call: a step
    ...
    with ledger.run("support", ticket, external_id="ticket-42") as run:
        graph.compile().invoke({"messages": [("user", "Refund order A-1")]})

Steps belong to the run whose `with ledger.run(...)` block is active (`current_run()`; LangGraph
carries context variables into its worker threads). A restarted process runs the graph from its
start again, checkpointer or not: recorded model calls return their recorded message (no call,
no tokens), recorded tool calls their recorded result, and no recorded write runs again.

Tools say what they are in their LangChain `metadata`: `{"effect": "read"}`, or a write with
`{"enforced_by": "tool"}` (honours `intentledger.integrations.step_key()`) or
`{"enforced_by": "ledger"}` (its effects are the ledger's own tools, called with
`current_run().tool(name, arguments)`, each a gateway step of its own); unmarked, a write
enforced by nobody, so a crash inside it goes to the review queue.
`@task` functions are journalled by decorating them with `intentledger.tool` under `@task`.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage, messages_from_dict
from langchain_core.messages.base import message_to_dict
from langgraph.prebuilt import ToolNode

from intentledger._run import Run, current_run
from intentledger.integrations import _core

# one per run: a ToolNode journals the calls of the message its model step recorded last
_orders: weakref.WeakKeyDictionary[Run, _core.CallOrder] = weakref.WeakKeyDictionary()
_orders_lock = threading.Lock()


def _order(run: Run) -> _core.CallOrder:
    with _orders_lock:
        return _orders.setdefault(run, _core.CallOrder())


def _content(message: Any) -> Any:
    if isinstance(message, BaseMessage):
        return [message.type, message.content, getattr(message, "tool_calls", None) or None]
    return message


class JournalledModel:
    """`invoke` / `ainvoke` on any model runnable, each call a `model` step of the current run."""

    def __init__(self, model: Any, *, name: str | None = None) -> None:
        self.model = model
        self.name = name or _model_name(model)

    def _arguments(self, input: Any) -> dict[str, Any]:
        messages = list(input) if isinstance(input, list | tuple) else [input]
        return {
            "model": self.name,
            "messages": len(messages),
            "conversation": _core.digest(
                [_content(m) for m in messages if getattr(m, "type", None) != "system"]
            ),
        }

    def _journal(self, run: Run, input: Any, ask: Callable[[], BaseMessage]) -> BaseMessage:
        def call(**_: Any) -> dict[str, Any]:
            message = ask()
            usage = getattr(message, "usage_metadata", None) or {}
            return {
                "message": message_to_dict(message),
                "usage": {
                    "input_tokens": int(usage.get("input_tokens", 0)),
                    "output_tokens": int(usage.get("output_tokens", 0)),
                },
            }

        recorded = run.model(call, name=f"model:{self.name}", **self._arguments(input))
        message = messages_from_dict([recorded["message"]])[0]
        _order(run).expect(str(call["id"]) for call in getattr(message, "tool_calls", None) or [])
        return message

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> BaseMessage:
        run = current_run()
        return self._journal(run, input, lambda: self.model.invoke(input, config, **kwargs))

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> BaseMessage:
        run = current_run()
        return await _core.model_step_from_async(
            run,
            lambda: self.model.ainvoke(input, config, **kwargs),
            lambda answer: self._journal(run, input, answer),
        )


def _model_name(model: Any) -> str:
    bound = getattr(model, "bound", model)  # a RunnableBinding from bind_tools
    for attribute in ("model_name", "model"):
        value = getattr(bound, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(bound).__name__


def journalled_model(model: Any, *, name: str | None = None) -> JournalledModel:
    """Wrap a chat model (or `model.bind_tools(...)`): each `invoke` is a journalled step."""
    return JournalledModel(model, name=name)


def journal_tool_call(request: Any, execute: Callable[[Any], Any]) -> Any:
    """A `ToolNode` `wrap_tool_call` handler: the call is a step of the current run."""
    run = current_run()
    call = request.tool_call
    call_id = str(call.get("id") or "")
    tool = request.tool
    effect, enforced_by = _core.tool_effect(getattr(tool, "metadata", None))
    arguments = _core.journalable(dict(call.get("args") or {}), what="arguments")
    order = _order(run)
    order.wait_for(call_id)
    try:

        def execute_once() -> Any:
            outcome = execute(request)
            if isinstance(outcome, ToolMessage):
                return {"content": outcome.content, "status": outcome.status}
            raise TypeError(
                f"tool {call['name']} returned {type(outcome).__name__}; only ToolMessage "
                "results are journalled (Command is not supported yet)"
            )

        recorded = _core.journal_tool(
            run,
            str(call["name"]),
            arguments,
            execute_once,
            effect=effect,
            enforced_by=enforced_by,
        )
    finally:
        order.done(call_id)
    if not (isinstance(recorded, dict) and "content" in recorded):
        # reconciled by the server from the gateway's key: its stored result, as the model's input
        recorded = {"content": json.dumps(recorded, ensure_ascii=False), "status": "success"}
    return ToolMessage(
        content=recorded["content"],
        status=recorded.get("status", "success"),
        tool_call_id=call_id,
        name=str(call["name"]),
    )


async def ajournal_tool_call(request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
    """The `awrap_tool_call` twin of `journal_tool_call`, for graphs run with `ainvoke`.

    The journal calls (and the wait for this call's turn) run in a worker thread; the tool runs
    on the graph's event loop.
    """
    return await _core.journal_from_async(
        lambda await_on_loop: journal_tool_call(request, lambda req: await_on_loop(execute(req)))
    )


def journalled_tool_node(tools: Sequence[Any], **options: Any) -> ToolNode:
    """`ToolNode(tools, ...)` whose every tool call is a journalled step (in the model's order)."""
    return ToolNode(
        list(tools),
        wrap_tool_call=journal_tool_call,
        awrap_tool_call=ajournal_tool_call,
        **options,
    )


__all__ = [
    "JournalledModel",
    "ajournal_tool_call",
    "journal_tool_call",
    "journalled_model",
    "journalled_tool_node",
]
