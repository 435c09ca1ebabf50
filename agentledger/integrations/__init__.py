"""Agent Ledger under the frameworks people already use: one module per framework.

    from agentledger.integrations.pydantic_ai import LedgerDurability   # pip install agentledger[pydantic-ai]
    from agentledger.integrations.openai_agents import LedgerModel      # ... [openai-agents]
    from agentledger.integrations.langgraph import journalled           # ... [langgraph]

Each module imports its framework when it is imported itself, never from here, so
`import agentledger` stays httpx-only. What they share (the step's idempotency key, the checks
that a value can be journalled) lives in `agentledger.integrations._core`.
"""

from agentledger.integrations._core import JournalError, step_key

__all__ = ["JournalError", "step_key"]
