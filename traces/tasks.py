from celery import shared_task

from teams.scope import every_team
from traces.exporter import export_pending


@shared_task(ignore_result=True, expires=60)
def export_traces() -> None:
    """Beat's round of the trace exporter (scheduled when an OTLP endpoint is set): what is
    committed, exported; skipped while another exporter (a foreground `export_traces`) runs."""
    with every_team("traces"):
        export_pending(wait_for_lock=False)
