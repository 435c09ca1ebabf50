"""PydanticAI under the ledger: every model response and tool call a journalled step.

    from intentledger.integrations.pydantic_ai import LedgerDurability

    with ledger.run("support", ticket, external_id="ticket-42") as run:
        result = agent.run_sync(prompt, capabilities=[LedgerDurability(run)])
        run.output = result.output

Built on PydanticAI's documented capability hooks: `wrap_model_request` journals each model
response as a read step (kind `model`; a replay returns the recorded response without calling
the model or spending tokens), `wrap_tool_execute` journals each function tool call as a step
(a write unless its metadata says `{"effect": "read"}`; see `_core.tool_effect`), and `prepare_tools`
makes every tool a barrier so steps keep their order. PydanticAI's own `UsageLimits` still apply
per process; the ledger's budgets add the total across processes.

The SDK is synchronous: each journal call runs in a worker thread while the tool or model
coroutine runs on the agent's own event loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai import ModelRetry
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_core import to_jsonable_python

from intentledger._run import Run
from intentledger.errors import StepFailed
from intentledger.integrations import _core


def _fallback(value: Any) -> Any:
    return to_jsonable_python(value)


def _conversation(messages: list[ModelMessage]) -> list[Any]:
    """What the model was shown, without what may change between runs: timestamps, ids, the
    system prompt (see `_core.digest`)."""
    view: list[Any] = []
    for message in messages:
        for part in message.parts:
            kind = getattr(part, "part_kind", type(part).__name__)
            if kind == "system-prompt":
                continue
            body = getattr(part, "content", None)
            if body is None:
                body = getattr(part, "args", None)
            view.append(
                [kind, getattr(part, "tool_name", None), to_jsonable_python(body, fallback=str)]
            )
    return view


@dataclasses.dataclass
class LedgerDurability(AbstractCapability[Any]):
    """Journal this agent run's model responses and tool calls as steps of a ledger `Run`."""

    run: Run
    _: dataclasses.KW_ONLY
    id: str | None = "intentledger"

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    async def prepare_tools(self, ctx: Any, tool_defs: list[Any]) -> list[Any]:
        # one step at a time, in the order the model asked: the journal's indices are the order
        return [dataclasses.replace(tool_def, sequential=True) for tool_def in tool_defs]

    async def wrap_model_request(
        self, ctx: Any, *, request_context: Any, handler: Callable[[Any], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        model = request_context.model
        arguments = {
            "model": str(getattr(model, "model_name", type(model).__name__)),
            "messages": len(request_context.messages),
            "conversation": _core.digest(_conversation(request_context.messages)),
        }

        def journal(ask: Callable[[], ModelResponse]) -> Any:
            def call(**_: Any) -> dict[str, Any]:
                response = ask()
                return {
                    "response": ModelMessagesTypeAdapter.dump_python([response], mode="json")[0],
                    "usage": {
                        "input_tokens": response.usage.input_tokens,
                        "output_tokens": response.usage.output_tokens,
                    },
                }

            return self.run.model(call, name=f"model:{arguments['model']}", **arguments)

        recorded = await _core.model_step_from_async(
            self.run, lambda: handler(request_context), journal
        )
        response = ModelMessagesTypeAdapter.validate_python([recorded["response"]])[0]
        assert isinstance(response, ModelResponse)
        return response

    async def wrap_tool_execute(
        self,
        ctx: Any,
        *,
        call: Any,
        tool_def: Any,
        args: Any,
        handler: Callable[[Any], Awaitable[Any]],
    ) -> Any:
        effect, enforced_by = _core.tool_effect(tool_def.metadata)
        arguments = _core.journalable(dict(args), what="arguments", fallback=_fallback)

        def journal(execute: Callable[[], Any]) -> Any:
            return _core.journal_tool(
                self.run,
                tool_def.name,
                arguments,
                execute,
                effect=effect,
                enforced_by=enforced_by,
                result_to_json=_fallback,
            )

        try:
            if effect == "read":  # tools run one at a time (prepare_tools): the index holds
                return await _core.read_tool_from_async(self.run, lambda: handler(args), journal)
            return await _core.journal_from_async(
                lambda await_on_loop: journal(lambda: await_on_loop(handler(args)))
            )
        except StepFailed as failed:
            # a recorded ModelRetry replays as one: the model is asked again, as the first time
            recorded = failed.result if isinstance(failed.result, dict) else {}
            if recorded.get("error") in ("ModelRetry", "ToolRetryError"):
                raise ModelRetry(str(recorded.get("message", ""))) from None
            raise


__all__ = ["LedgerDurability"]
