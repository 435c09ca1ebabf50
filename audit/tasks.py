"""Celery tasks: thin callers of the audit services (checkpoints, exports, retention)."""

from celery import shared_task

from audit import checkpoints, exports, retention
from audit.models import ExportJob
from teams.scope import every_team, team_of_row


@shared_task(name="audit.tasks.checkpoint_write")
def checkpoint_write() -> int | None:
    with every_team("checkpoints"):
        result = checkpoints.checkpoint_create()
    return result.checkpoint.seq if result.checkpoint else None


@shared_task(name="audit.tasks.export_job_run", acks_late=True, reject_on_worker_lost=True)
def export_job_run_task(job_id: str) -> str | None:
    with team_of_row(ExportJob, job_id):
        job = exports.export_job_run(job_id=job_id)
    return job.status if job else None


@shared_task(name="audit.tasks.exports_expire")
def exports_expire() -> int:
    with every_team("sweeps"):
        return exports.exports_expire()


@shared_task(name="audit.tasks.retention_purge")
def retention_purge() -> int:
    with every_team("retention"):
        return retention.retention_purge().purged
