"""Entry points the Celery task calls: resume one run by id, with the model from the environment."""

from __future__ import annotations

import os

from intentledger import Ledger

from support_agent.llm import model_from_name
from support_agent.support import Outcome, run_support


def resume_support(ledger: Ledger, *, run_id: str, worker: str) -> Outcome:
    return run_support(
        ledger,
        run_id=run_id,
        model=model_from_name(os.environ.get("AGENT_MODEL", "scripted")),
        worker=worker,
        ttl_seconds=int(os.environ.get("AGENT_LEASE_TTL", "30")),
        email_enforced_by=os.environ.get("AGENT_EMAIL_ENFORCED_BY", "ledger"),
    )
