"""A bulk export over the threshold runs on a real Celery worker (Redis DB 4) and is downloaded."""

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.test import Client

from audit.models import ExportJob, ExportStatus
from audit.verify import load_public_key, verify_export_file
from bench.testdata import runs_bulk_create
from config.celery import app
from tests.audit.conftest import PUBLIC_KEY, SIGNING_KEY
from tests.conftest import ROOT
from tests.conftest import test_database_url as database_url

pytestmark = pytest.mark.slow
REDIS_URL = "redis://127.0.0.1:6379/4"


@pytest.fixture
def celery_on_db4() -> Iterator[None]:
    """Point this process's Celery app at Redis DB 4 (our isolation), then back."""
    previous = app.conf.broker_url
    app.conf.update(broker_url=REDIS_URL)
    app._after_fork()  # type: ignore[attr-defined]  # drop pooled connections to the old broker
    try:
        yield
    finally:
        app.conf.update(broker_url=previous)
        app._after_fork()  # type: ignore[attr-defined]


@pytest.fixture
def export_worker(settings: Any) -> Iterator[subprocess.Popen[bytes]]:
    redis.Redis.from_url(REDIS_URL).flushdb()
    name = f"audit-test-{uuid.uuid4().hex[:6]}"
    log_path = ROOT / ".pytest_cache" / f"{name}.log"
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": REDIS_URL,
        "AUDIT_SIGNING_KEY": SIGNING_KEY,
        "AUDIT_EXPORT_DIR": settings.AUDIT_EXPORT_DIR,
    }
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "-l", "info", "-P", "solo",
             "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while b"ready." not in log_path.read_bytes():
                assert proc.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "celery worker not ready in 60 s"
                time.sleep(0.2)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


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

    deadline = time.monotonic() + 90
    while job.status in (ExportStatus.QUEUED, ExportStatus.RUNNING):
        assert time.monotonic() < deadline, f"export still {job.status}"
        time.sleep(0.3)
        job.refresh_from_db()
    assert job.status == ExportStatus.DONE, job.error
    assert job.done_runs == 40

    page = client.get(response["Location"])
    assert b"Download agentledger-export-" in page.content
    download = client.get(f"/audit/exports/{job.pk}/download")
    path = job.path.with_suffix(".copy")
    path.write_bytes(b"".join(download.streaming_content))  # type: ignore[attr-defined]
    report = verify_export_file(path, load_public_key(PUBLIC_KEY))
    assert report.ok and report.runs == 40
