"""A bulk export over the threshold runs on a real Celery worker (this process's own Redis
database) and is downloaded."""

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from audit.models import ExportJob, ExportStatus
from audit.verify import load_public_key, verify_export_file
from bench.testdata import runs_bulk_create
from tests.audit.conftest import PUBLIC_KEY, SIGNING_KEY
from tests.processes import (
    STARTUP_TIMEOUT,
    celery_app_on,
    flush_redis,
    redis_url,
    start_celery_worker,
    stop_process,
)

pytestmark = pytest.mark.slow
REDIS_URL = redis_url()


@pytest.fixture
def celery_on_db4() -> Iterator[None]:
    """Point this process's Celery app at its own Redis database, then back (the name is from
    when that was Redis DB 4)."""
    with celery_app_on(REDIS_URL):
        yield


@pytest.fixture
def export_worker(settings: Any) -> Iterator[subprocess.Popen[bytes]]:
    flush_redis()
    env = {
        "CELERY_BROKER_URL": REDIS_URL,
        "AUDIT_SIGNING_KEY": SIGNING_KEY,
        "AUDIT_EXPORT_DIR": settings.AUDIT_EXPORT_DIR,
    }
    proc = start_celery_worker(env=env, pool="solo", name="audit-test")
    try:
        yield proc
    finally:
        stop_process(proc, timeout=20)


def export_finished(job: ExportJob, worker: subprocess.Popen[bytes]) -> ExportJob:
    """The job once its worker has finished it: waits on the worker's own account of the task
    (received, then succeeded or failed, in its log) and on the job's row, not on a clock. A
    worker under load may take long; one that died, never received the task or finished it
    without the row saying so fails at once, with its log (a stalled job is a defect to see, not
    a timeout to raise). STARTUP_TIMEOUT only bounds a worker that says nothing at all."""
    log: Path = worker.log_path  # type: ignore[attr-defined]
    task = re.compile(r"Task audit\.tasks\.export_job_run\[[^]]+\] (succeeded|failed|raised)")
    said = time.monotonic()
    seen = ""
    while True:
        job.refresh_from_db()
        if job.status not in (ExportStatus.QUEUED, ExportStatus.RUNNING):
            return job
        text = log.read_text(errors="replace")
        ended = task.search(text)
        if ended:
            job.refresh_from_db()  # the task commits its row before it reports
            assert job.status not in (ExportStatus.QUEUED, ExportStatus.RUNNING), (
                f"the worker's task {ended.group(1)} but the export is still {job.status}:\n"
                + text[-3000:]
            )
            return job
        assert worker.poll() is None, f"the export's worker died:\n{text[-3000:]}"
        if text != seen:  # the worker is still saying something: not stalled
            seen, said = text, time.monotonic()
        assert time.monotonic() - said < STARTUP_TIMEOUT, (
            f"export {job.status}; its worker said nothing for {STARTUP_TIMEOUT:.0f} s:\n"
            + text[-3000:]
        )
        time.sleep(0.3)


def test_a_bulk_export_runs_on_a_worker_and_the_page_offers_the_download(
    transactional_db: Any,
    settings: Any,
    celery_on_db4: None,
    export_worker: subprocess.Popen[bytes],
    client_for: Callable[[str], Client],
) -> None:
    settings.AUDIT_EXPORT_SYNC_MAX_RUNS = 10
    runs_bulk_create(runs=40, steps_per_run=3)
    client = client_for("auditors")
    response = client.post("/audit/exports/", {"format": "jsonl"})
    assert response.status_code == 302
    job = ExportJob.objects.get()

    job = export_finished(job, export_worker)
    assert job.status == ExportStatus.DONE, job.error
    assert job.done_runs == 40

    page = client.get(response["Location"])
    assert b"Download intentledger-export-" in page.content
    download = client.get(f"/audit/exports/{job.pk}/download")
    path = job.path.with_suffix(".copy")
    path.write_bytes(b"".join(download.streaming_content))  # type: ignore[attr-defined]
    report = verify_export_file(path, load_public_key(PUBLIC_KEY))
    assert report.ok and report.runs == 40
