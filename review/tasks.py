"""Beat task: escalate review items waiting longer than the SLA (one mail per item)."""

from celery import shared_task

from review.services import login_failures_prune, review_items_escalate


@shared_task(acks_late=True)
def escalate_waiting_items() -> int:
    """Mail the supervisors about items past the SLA; also forget stale login-failure counters."""
    login_failures_prune()
    return review_items_escalate()
