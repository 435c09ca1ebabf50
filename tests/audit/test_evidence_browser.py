"""An auditor builds an evidence pack from the exports page in a real browser (Debian Chromium
via Playwright, a live server), watches its progress while a real Celery worker builds it, and
downloads a pack that verifies."""

import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from audit.evidence_verify import verify_pack
from audit.models import ExportJob, ExportStatus
from audit.verify import load_public_key
from bench.testdata import runs_bulk_create
from dashboard.roles import AUDITORS
from tests.audit.conftest import PUBLIC_KEY, SIGNING_KEY
from tests.processes import (
    celery_app_on,
    flush_redis,
    redis_url,
    start_celery_worker,
    stop_process,
)
from tests.review.browser import shot, signed_in
from tests.review.factories import user_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.slow]
REDIS_URL = redis_url()


@pytest.fixture
def pack_worker(settings: Any) -> Iterator[subprocess.Popen[bytes]]:
    flush_redis()
    env = {
        "CELERY_BROKER_URL": REDIS_URL,
        "AUDIT_SIGNING_KEY": SIGNING_KEY,
        "AUDIT_EXPORT_DIR": settings.AUDIT_EXPORT_DIR,
    }
    with celery_app_on(REDIS_URL):
        proc = start_celery_worker(env=env, pool="solo", name="evidence-test")
        try:
            yield proc
        finally:
            stop_process(proc, timeout=20)


def test_an_auditor_builds_a_pack_sees_its_progress_and_downloads_it(
    browser: Any, review_server: str, pack_worker: Any, tmp_path: Path
) -> None:
    base = review_server
    runs_bulk_create(runs=1200, steps_per_run=2, agent="support")
    runs_bulk_create(runs=5, steps_per_run=2, agent="other")
    user_in(AUDITORS, "audrey")
    page = signed_in(browser, base, "audrey")

    page.goto(f"{base}/audit/exports/")
    today = timezone.now().date()
    page.fill("#evidence-pack input[name=period_from]", str(today - timedelta(days=1)))
    page.fill("#evidence-pack input[name=period_to]", str(today))
    page.fill("#evidence-pack input[name=agents]", "support")
    page.click("#build-evidence-pack")

    job = ExportJob.objects.get()
    page.wait_for_url(f"{base}/audit/exports/{job.pk}/")
    assert "Evidence pack" in page.locator("h1").inner_text()
    assert job.format == "evidence" and job.total_runs == 1200
    # the progress the page shows while the worker builds it (htmx polls it every second)
    assert page.locator("#export-status").inner_text() in ("queued", "running")
    assert page.locator("progress").count() == 1
    assert "of 1200 runs" in page.inner_text("body")
    shot(page, "evidence-pack-progress")

    download_link = page.locator("#export-download")
    download_link.wait_for(timeout=120_000)  # htmx polls until the worker is done
    job.refresh_from_db()
    assert job.status == ExportStatus.DONE and job.done_runs == 1200
    assert "1200 of 1200 runs (100%)" in page.inner_text("body")
    with page.expect_download() as info:
        download_link.click()
    path = tmp_path / "downloaded.zip"
    info.value.save_as(path)

    report = verify_pack(str(path), [load_public_key(PUBLIC_KEY)])
    assert report.ok, report.problems
    assert report.runs == 1200 and report.manifest["filters"] == {
        "agents": ["support"],
        "team": "default",
    }
    assert path.read_bytes() == job.path.read_bytes()
