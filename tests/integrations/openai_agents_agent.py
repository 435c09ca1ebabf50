"""An OpenAI Agents SDK agent under the ledger, with a scripted offline `Model` (see conftest).

Run by path, not with -m: the SDK's import name is `agents`, as is this repository's Django app,
so the SDK is imported before the repository root joins sys.path.
"""

import json
import os
import sys
from pathlib import Path
from typing import Any

# mypy resolves `agents` to this repository's Django app, hence the ignore
from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from intentledger import Run
from intentledger.integrations.openai_agents import journalled

from tests.integrations._agent_kit import append_tool, count_model_call, main

ENFORCED_BY: Any = os.environ.get("APPEND_ENFORCED_BY", "nobody")


def call(call_id: str, name: str, arguments: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", call_id=call_id, name=name, arguments=arguments, status="completed"
    )


class ScriptedModel(Model):
    """Asks for `calls` one by one, then answers: one model call each, 100 + 10 tokens each."""

    def __init__(self, calls: list[tuple[str, dict[str, Any]]], answer: str) -> None:
        self.calls = calls
        self.answer = answer

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        count_model_call()
        done = sum(
            1
            for item in input
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        )
        if done < len(self.calls):
            name, arguments = self.calls[done]
            output: list[Any] = [call(f"c-{done}-{name}", name, json.dumps(arguments))]
        else:
            text = ResponseOutputText(type="output_text", text=self.answer, annotations=[])
            output = [
                ResponseOutputMessage(
                    type="message", id="m-1", role="assistant", status="completed", content=[text]
                )
            ]
        usage = Usage(requests=1, input_tokens=100, output_tokens=10, total_tokens=110)
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@function_tool
def lookup(ticket: str) -> str:
    return f"{ticket}: open"


@function_tool
def append(line: str) -> str:
    return append_tool(line, ENFORCED_BY)


SCRIPT = [("lookup", {"ticket": "T-1"}), ("append", {"line": "refund T-1"})]
agent = Agent(name="support", model=ScriptedModel(SCRIPT, "Refunded."), tools=[lookup, append])
if os.environ.get("TRIAGE"):  # a triage agent hands the ticket to the support agent first
    model = ScriptedModel([("transfer_to_support", {}), *SCRIPT], "Refunded.")
    support = Agent(name="support", model=model, tools=[lookup, append])
    agent = Agent(name="triage", model=model, handoffs=[support])


def body(run: Run) -> Any:
    durable = journalled(agent, run, read={"lookup"}, enforced_by={"append": ENFORCED_BY})
    return Runner.run_sync(durable, "Refund ticket T-1").final_output


if __name__ == "__main__":
    main(body)
