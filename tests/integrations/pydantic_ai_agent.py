"""A PydanticAI agent under the ledger, with PydanticAI's offline FunctionModel (see conftest)."""

import os

from intentledger import Run
from intentledger.integrations.pydantic_ai import LedgerDurability
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from tests.integrations._agent_kit import append_tool, count_model_call, main

ENFORCED_BY = os.environ.get("APPEND_ENFORCED_BY", "nobody")


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Look the ticket up, append a line, answer: three model calls, 100 + 10 tokens each."""
    count_model_call()
    usage = RequestUsage(input_tokens=100, output_tokens=10)
    turn = sum(1 for message in messages if message.kind == "response")
    if turn == 0:
        return ModelResponse(parts=[ToolCallPart("lookup", {"ticket": "T-1"})], usage=usage)
    if turn == 1:
        return ModelResponse(parts=[ToolCallPart("append", {"line": "refund T-1"})], usage=usage)
    return ModelResponse(parts=[TextPart("Refunded.")], usage=usage)


# the system prompt may differ between the killed process and its restart (today's date...)
agent = Agent(FunctionModel(scripted), system_prompt=os.environ.get("SYSTEM_PROMPT", "Refund."))


@agent.tool_plain(metadata={"effect": "read"})
def lookup(ticket: str) -> dict[str, str]:
    return {"ticket": ticket, "status": "open"}


@agent.tool_plain(metadata={"enforced_by": ENFORCED_BY})
def append(line: str) -> str:
    return append_tool(line, ENFORCED_BY)


def body(run: Run) -> str:
    result = agent.run_sync("Refund ticket T-1", capabilities=[LedgerDurability(run)])
    return result.output


if __name__ == "__main__":
    main(body)
