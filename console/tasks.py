"""Beat tasks: thin callers of the console's services."""

from celery import shared_task

from console.rollup import run_days_refresh


@shared_task(name="console.tasks.refresh_run_days")
def refresh_run_days() -> int:
    return run_days_refresh()
