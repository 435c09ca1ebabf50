"""A LangGraph agent under the ledger, with a scripted offline chat model (see conftest)."""

import os
from typing import Any

from intentledger import Run
from intentledger.integrations.langgraph import journalled_model, journalled_tool_node
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph

from tests.integrations._agent_kit import append_tool, count_model_call, main

ENFORCED_BY = os.environ.get("APPEND_ENFORCED_BY", "nobody")


class ScriptedChatModel(BaseChatModel):
    """Asks for `calls` one by one, then answers: one model call each, 100 + 10 tokens each."""

    calls: list[tuple[str, dict[str, Any]]]
    answer: str

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        count_model_call()
        done = sum(1 for message in messages if isinstance(message, ToolMessage))
        usage = {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}
        if done < len(self.calls):
            name, args = self.calls[done]
            call = {"name": name, "args": args, "id": f"c-{done}-{name}", "type": "tool_call"}
            message = AIMessage(content="", tool_calls=[call], usage_metadata=usage)
        else:
            message = AIMessage(content=self.answer, usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def lookup(ticket: str) -> str:
    """Look a ticket up."""
    return f"{ticket}: open"


@tool
def append(line: str) -> str:
    """Append a line to the refunds file (or, enforced by the ledger, open a ticket for it)."""
    return append_tool(line, ENFORCED_BY)


lookup.metadata = {"effect": "read"}  # LangChain's own tool metadata says what a tool is
append.metadata = {"enforced_by": ENFORCED_BY}


def build_graph(chat_model: Any, tools: list[Any]) -> Any:
    model = journalled_model(chat_model.bind_tools(tools))

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if getattr(last, "tool_calls", None) else END

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", journalled_tool_node(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile()


SCRIPT = [("lookup", {"ticket": "T-1"}), ("append", {"line": "refund T-1"})]
graph = build_graph(ScriptedChatModel(calls=SCRIPT, answer="Refunded."), [lookup, append])


def body(run: Run) -> Any:
    state = graph.invoke({"messages": [("user", "Refund ticket T-1")]})
    return state["messages"][-1].content


if __name__ == "__main__":
    main(body)
