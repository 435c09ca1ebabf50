"""Beat task: escalate review items waiting longer than the SLA (one mail per item)."""

from celery import shared_task

from review.services import review_items_escalate


@shared_task(acks_late=True)
def escalate_waiting_items() -> int:
    return review_items_escalate()
