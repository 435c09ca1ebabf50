"""Agent runs as Celery tasks, safe to redeliver: the journal turns a second delivery into a replay.

acks_late + reject_on_worker_lost: a worker killed mid-run does not ack, so the broker hands the
task to another worker, which resumes the run from its journal.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from intentledger import Ledger, LedgerUnavailable

from celery_agents.registry import agent_runner
from runs.inprocess import in_process_ledger
from runs.models import Run
from runs.services.enforcement import run_runner_claim_for_celery
from runs.tokens import celery_agents_token_ensure
from teams.models import Team
from teams.scope import team_of, team_scope

logger = logging.getLogger(__name__)

# wait this long before retrying a run whose lease another live worker holds
LEASE_HELD_RETRY_SECONDS = 5
# and this long when the ledger could not be reached (the SDK already retried with backoff)
LEDGER_DOWN_RETRY_SECONDS = 10


@shared_task(
    bind=True,
    name="agents.run_agent",
    acks_late=True,
    reject_on_worker_lost=True,  # the task option behind task_reject_on_worker_lost
    max_retries=None,
)
def run_agent(self: Any, run_id: str, agent: str) -> dict[str, Any]:
    """Run or resume `agent` for `run_id` until it completes or stops cleanly.

    The worker name is the Celery node's, so a redelivery to the same node takes its own lease
    back at once; another node waits for the lease to expire (retry).
    """
    runner = agent_runner(agent)
    worker = f"celery:{self.request.hostname or 'local'}"
    team_id = team_of(Run, run_id)
    team = None if team_id is None else Team.objects.filter(pk=team_id).first()
    if team is None:
        logger.warning("run %s does not exist; nothing to run", run_id)
        return {"run_id": run_id, "status": "not_found", "replayed": 0}
    with team_scope(team.pk):
        claimed = run_runner_claim_for_celery(run_id=run_id)
    if not claimed:
        # another process runs it (runner external): never take it over
        logger.warning("run %s is run by another process (runner external); not running it", run_id)
        return {"run_id": run_id, "status": "external", "replayed": 0}
    try:
        with agent_ledger(team) as ledger:
            outcome = runner(ledger, run_id=run_id, worker=worker)
    except LedgerUnavailable as error:
        logger.warning("run %s: ledger unavailable, retrying: %s", run_id, error)
        raise self.retry(countdown=LEDGER_DOWN_RETRY_SECONDS) from error
    if outcome.error and outcome.status not in ("completed", "lease_held"):
        logger.warning("run %s: %s: %s", run_id, outcome.status, outcome.error)
    else:
        logger.info("run %s: %s", run_id, outcome.status)
    if outcome.status == "lease_held":
        raise self.retry(countdown=LEASE_HELD_RETRY_SECONDS)
    return {"run_id": run_id, "status": outcome.status, "replayed": outcome.replayed}


def agent_ledger(team: Team | None = None) -> Ledger:
    """The ledger as the agents' worker token sees it: in-process beside the database (the
    default), or over HTTP when LEDGER_AGENT_TRANSPORT says `http`. In-process, without an
    INTENTLEDGER_TOKEN, the agents use this ledger's own token in the run's team (runs.tokens),
    so a worker started beside the database needs nothing copied by hand."""
    if settings.LEDGER_AGENT_TRANSPORT == "http":
        if not settings.INTENTLEDGER_TOKEN:
            raise ImproperlyConfigured(AGENTS_OVER_HTTP_REFUSAL)
        return Ledger(settings.INTENTLEDGER_URL, settings.INTENTLEDGER_TOKEN)
    return in_process_ledger(settings.INTENTLEDGER_TOKEN or celery_agents_token_ensure(team))


AGENTS_OVER_HTTP_REFUSAL = (
    "LEDGER_AGENT_TRANSPORT=http needs INTENTLEDGER_TOKEN (a worker token: manage.py "
    "create_worker_token NAME) and INTENTLEDGER_URL; or leave LEDGER_AGENT_TRANSPORT unset and "
    "the agents journal in-process with the ledger's own token."
)
