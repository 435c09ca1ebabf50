"""Beat task: a thin caller of the retention service."""

from celery import shared_task

from teams.scope import every_team
from tools.idempotency import idempotency_keys_prune


@shared_task(name="tools.tasks.prune_idempotency_keys")
def prune_idempotency_keys() -> int:
    with every_team("sweeps"):
        return idempotency_keys_prune()
