"""Agent Ledger worker SDK: journal an agent's steps so a crash resumes instead of redoing.

    from intentledger import Ledger
    ledger = Ledger("http://ledger:8000", token)
    with ledger.run("support", {"ticket": 42}, external_id="ticket-42") as run:
        hits = run.tool("kb.search", {"query": "refund"}, effect="read")
        run.tool("email.send", {"to": "a@b.example", "subject": "Hi", "body": "..."})
        run.output = {"ok": True}

Django-free; depends on urllib3 only (imported when the first Ledger is built). `Ledger` journals
over HTTP; `Ledger(transport=...)` takes another `Transport` (the server's in-process one).
"""

from intentledger import errors
from intentledger._ledger import Ledger
from intentledger._run import Run, StepInfo, current_run
from intentledger._tool import tool
from intentledger._transport import StepIntent, StepOutcome, ToolCall, Transport
from intentledger.errors import *  # noqa: F403  (the public errors: errors.__all__)

__all__ = [
    "Ledger",
    "Run",
    "StepInfo",
    "StepIntent",
    "StepOutcome",
    "ToolCall",
    "Transport",
    "current_run",
    "tool",
]
__all__ += errors.__all__
