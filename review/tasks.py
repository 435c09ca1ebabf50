"""Beat task: escalate review items waiting longer than the SLA (one mail per item)."""

from celery import shared_task

from review.models import WebhookDelivery
from review.services.escalations import review_items_escalate
from review.services.webhooks import WebhookFailed, webhook_deliver
from teams.scope import every_team, team_of_row


@shared_task(acks_late=True)
def escalate_waiting_items() -> int:
    """Mail the supervisors about items past the SLA."""
    with every_team("sweeps"):
        return review_items_escalate()


@shared_task(
    acks_late=True,
    autoretry_for=(WebhookFailed,),
    retry_backoff=2,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=8,
    # a backstop behind the delivery's own deadline (WEBHOOK_DELIVERY_SECONDS): the worker
    # process is replaced if an attempt ever outlives it
    time_limit=120,
)
def deliver_webhook(delivery_id: int) -> bool:
    """Post one escalation to its webhook; a failure (no answer, 5xx) retries with backoff.

    Routed to the WEBHOOK_QUEUE queue (CELERY_TASK_ROUTES): a slow receiver holds a webhook
    worker, never one that runs agents."""
    with team_of_row(WebhookDelivery, delivery_id):
        return webhook_deliver(delivery_id=delivery_id)
