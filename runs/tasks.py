"""Beat tasks: thin callers of the enforcement services."""

from celery import shared_task

from runs.services.approvals import approvals_expire_due
from runs.services.enforcement import (
    runs_enforce_deadlines,
    runs_reap_expired_leases,
    runs_redispatch_idle,
)


@shared_task(name="runs.tasks.reap_expired_leases")
def reap_expired_leases() -> int:
    return runs_reap_expired_leases()


@shared_task(name="runs.tasks.enforce_deadlines")
def enforce_deadlines() -> int:
    return runs_enforce_deadlines()


@shared_task(name="runs.tasks.redispatch_idle_runs")
def redispatch_idle_runs() -> int:
    return runs_redispatch_idle()


@shared_task(name="runs.tasks.expire_approvals")
def expire_approvals() -> int:
    return approvals_expire_due()
