"""Agent Ledger under the frameworks people already use: one module per framework.

    from intentledger.integrations.pydantic_ai import LedgerDurability   # pip install intentledger[pydantic-ai]
    from intentledger.integrations.openai_agents import LedgerModel      # ... [openai-agents]
    from intentledger.integrations.langgraph import journalled           # ... [langgraph]

Each module imports its framework when it is imported itself, never from here, so
`import intentledger` stays urllib3-only. What they share (the step's idempotency key, the checks
that a value can be journalled) lives in `intentledger.integrations._core`.
"""

from intentledger.integrations._core import JournalError, step_key

__all__ = ["JournalError", "step_key"]
