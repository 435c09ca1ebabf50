"""Beat tasks: thin callers of the enforcement services, each over every team (teams.scope)."""

from celery import shared_task

from runs.services.approvals import approvals_expire_due
from runs.services.enforcement import (
    runs_enforce_deadlines,
    runs_reap_expired_leases,
    runs_redispatch_idle,
)
from teams.scope import every_team


@shared_task(name="runs.tasks.reap_expired_leases")
def reap_expired_leases() -> int:
    with every_team("reaper"):
        return runs_reap_expired_leases()


@shared_task(name="runs.tasks.enforce_deadlines")
def enforce_deadlines() -> int:
    with every_team("sweeps"):
        return runs_enforce_deadlines()


@shared_task(name="runs.tasks.redispatch_idle_runs")
def redispatch_idle_runs() -> int:
    with every_team("reaper"):
        return runs_redispatch_idle()


@shared_task(name="runs.tasks.expire_approvals")
def expire_approvals() -> int:
    with every_team("sweeps"):
        return approvals_expire_due()
