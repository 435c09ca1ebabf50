"""Celery tasks: thin callers of the audit services (checkpoints, exports, retention)."""

from celery import shared_task

from audit import checkpoints, exports, retention


@shared_task(name="audit.tasks.checkpoint_write")
def checkpoint_write() -> int | None:
    result = checkpoints.checkpoint_create()
    return result.checkpoint.seq if result.checkpoint else None


@shared_task(name="audit.tasks.export_job_run", acks_late=True, reject_on_worker_lost=True)
def export_job_run_task(job_id: str) -> str | None:
    job = exports.export_job_run(job_id=job_id)
    return job.status if job else None


@shared_task(name="audit.tasks.exports_expire")
def exports_expire() -> int:
    return exports.exports_expire()


@shared_task(name="audit.tasks.retention_purge")
def retention_purge() -> int:
    return retention.retention_purge().purged
