"""Beat tasks: thin callers of the console's services."""

from celery import shared_task

from console.rollup import run_days_refresh
from teams.scope import every_team


@shared_task(name="console.tasks.refresh_run_days")
def refresh_run_days() -> int:
    with every_team("sweeps"):
        return run_days_refresh()
