"""Auditors and admins export from the dashboard; supervisors cannot; big exports run as jobs."""

import csv
import io
import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from audit.exports import export_job_run, exports_expire
from audit.models import ExportJob, ExportStatus
from audit.verify import load_public_key, verify_export_file
from bench.testdata import runs_bulk_create
from dashboard.audit import AuditEntry
from runs.models import Run
from tests.audit.conftest import PUBLIC_KEY

PAGES = ["/audit/exports/", "/audit/checkpoints/"]


@pytest.mark.parametrize("group", ["auditors", "admins"])
def test_auditors_and_admins_export(client_for: Callable[[str], Client], group: str) -> None:
    runs_bulk_create(runs=3, steps_per_run=2)
    client = client_for(group)
    for page in PAGES:
        assert client.get(page).status_code == 200
    response = client.post("/audit/exports/", {"format": "jsonl"})
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Disposition"].startswith('attachment; filename="intentledger-')
    lines = b"".join(response.streaming_content).splitlines()  # type: ignore[attr-defined]
    assert [json.loads(x)["kind"] for x in lines] == ["header", "run", "run", "run", "trailer"]
    entry = AuditEntry.objects.get(action="export.download")
    assert entry.actor_name == f"{group}-user" and entry.details["format"] == "jsonl"


def test_supervisors_cannot_export(client_for: Callable[[str], Client]) -> None:
    run_id = runs_bulk_create(runs=1, steps_per_run=1)[0]
    client = client_for("supervisors")
    for page in PAGES:
        assert client.get(page).status_code == 403
    assert client.post("/audit/exports/", {"format": "jsonl"}).status_code == 403
    assert client.get(f"/audit/runs/{run_id}/export?format=jsonl").status_code == 403
    assert client.get("/audit/retention/").status_code == 403
    assert not AuditEntry.objects.filter(action__startswith="export").exists()


def test_anonymous_visitors_are_sent_to_log_in(db: Any) -> None:
    response = Client().get("/audit/exports/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_one_runs_export_verifies_and_its_csv_has_one_row_per_step(
    client_for: Callable[[str], Client], tmp_path: Path
) -> None:
    ids = runs_bulk_create(runs=12, steps_per_run=4)
    client = client_for("auditors")
    response = client.get(f"/audit/runs/{ids[10]}/export?format=jsonl")
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(response.streaming_content))  # type: ignore[attr-defined]
    report = verify_export_file(path, load_public_key(PUBLIC_KEY))
    assert report.ok and report.runs == 1
    record = json.loads(path.read_bytes().splitlines()[1])
    assert record["run"]["id"] == str(ids[10])
    assert [s["index"] for s in record["steps"]] == [0, 1, 2, 3]
    assert record["resolutions"][0]["action"] == "sent"  # every 10th bench run has one

    response = client.get(f"/audit/runs/{ids[10]}/export?format=csv")
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))  # type: ignore[attr-defined]
    assert [r["step_index"] for r in rows] == ["0", "1", "2", "3"]
    assert {r["run_id"] for r in rows} == {str(ids[10])}
    assert rows[3]["resolution_by"] == "alice"


def test_csv_cells_that_look_like_formulas_are_defused(client_for: Callable[[str], Client]) -> None:
    run_id = runs_bulk_create(runs=1, steps_per_run=1, agent="=HYPERLINK(evil)")[0]
    response = client_for("auditors").get(f"/audit/runs/{run_id}/export?format=csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))  # type: ignore[attr-defined]
    assert rows[0]["agent"] == "'=HYPERLINK(evil)"


def test_filters_select_runs_and_bad_filters_write_nothing(
    client_for: Callable[[str], Client],
) -> None:
    runs_bulk_create(runs=4, steps_per_run=1, agent="alpha")
    runs_bulk_create(runs=2, steps_per_run=1, agent="beta", status="failed")
    client = client_for("admins")
    response = client.post("/audit/exports/", {"format": "csv", "agent": "beta"})
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))  # type: ignore[attr-defined]
    assert {r["agent"] for r in rows} == {"beta"} and len(rows) == 2
    response = client.post("/audit/exports/", {"format": "csv", "status": "completed"})
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))  # type: ignore[attr-defined]
    assert {r["agent"] for r in rows} == {"alpha"}
    today = timezone.now().date()
    response = client.post(
        "/audit/exports/",
        {
            "format": "jsonl",
            "created_from": str(today),
            "created_to": str(today - timedelta(days=2)),
        },
    )
    assert response.status_code == 400
    assert b"The end date is before the start date." in response.content
    response = client.post("/audit/exports/", {"format": "xml"})
    assert response.status_code == 400
    assert AuditEntry.objects.filter(action__startswith="export").count() == 2


def test_a_big_export_runs_as_a_job_with_progress_and_a_download_link(
    client_for: Callable[[str], Client], settings: Any
) -> None:
    settings.AUDIT_EXPORT_SYNC_MAX_RUNS = 5
    runs_bulk_create(runs=8, steps_per_run=2)
    client = client_for("auditors")
    response = client.post("/audit/exports/", {"format": "jsonl"})
    job = ExportJob.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/audit/exports/{job.pk}/"
    assert job.status == ExportStatus.QUEUED and job.total_runs == 8
    assert AuditEntry.objects.get(action="export.queue").target == f"export:{job.pk}"

    page = client.get(f"/audit/exports/{job.pk}/", headers={"HX-Request": "true"})
    assert b"0 of 8 runs" in page.content and b"every 1s" in page.content

    export_job_run(job_id=job.pk)  # what the Celery task does
    job.refresh_from_db()
    assert job.status == ExportStatus.DONE and job.done_runs == 8
    assert job.path.name == f"intentledger-export-{job.pk}.jsonl"
    page = client.get(f"/audit/exports/{job.pk}/", headers={"HX-Request": "true"})
    assert page.status_code == 286  # htmx: stop polling
    assert f"/audit/exports/{job.pk}/download".encode() in page.content

    download = client.get(f"/audit/exports/{job.pk}/download")
    assert download.status_code == 200
    body = b"".join(download.streaming_content)  # type: ignore[attr-defined]
    assert body == job.path.read_bytes()
    assert verify_export_file(job.path, load_public_key(PUBLIC_KEY)).ok

    # another auditor cannot fetch someone else's export
    from django.contrib.auth.models import User

    from teams.models import default_team
    from teams.services import grant_role

    other = User.objects.create_user(username="other-auditor")
    grant_role(other, default_team(), "auditor", actor="tests")
    stranger = Client()
    stranger.force_login(other)
    assert stranger.get(f"/audit/exports/{job.pk}/download").status_code == 404

    # files are kept for the configured time, then deleted by the beat task
    assert exports_expire(now=timezone.now()) == 0
    assert job.expires_at is not None
    assert exports_expire(now=job.expires_at + timedelta(seconds=1)) == 1
    job.refresh_from_db()
    assert job.status == ExportStatus.EXPIRED and not job.path.exists()
    assert client.get(f"/audit/exports/{job.pk}/download").status_code == 404


def test_export_ids_in_urls_cannot_name_a_path(client_for: Callable[[str], Client]) -> None:
    client = client_for("admins")
    for url in (
        "/audit/exports/..%2F..%2Fetc%2Fpasswd/download",
        "/audit/exports/../../settings.py/download",
    ):
        assert client.get(url).status_code == 404
    assert Run.objects.count() == 0


def test_without_a_signing_key_a_jsonl_export_is_refused_up_front(
    client_for: Callable[[str], Client], settings: Any
) -> None:
    settings.AUDIT_SIGNING_KEY = ""
    settings.DEBUG = False
    run_id = runs_bulk_create(runs=1, steps_per_run=1)[0]
    client = client_for("auditors")
    response = client.get(f"/audit/runs/{run_id}/export?format=jsonl")
    assert response.status_code == 503 and b"generate_signing_key" in response.content
    assert client.get(f"/audit/runs/{run_id}/export?format=csv").status_code == 200


def test_the_alert_banner_tag_shows_open_alerts_on_any_page(db: Any) -> None:
    from django.template import Context, Template

    from audit.models import ChainAlert

    template = Template("{% load audit_alerts %}{% chain_alerts %}")
    assert "Hash chain broken" not in template.render(Context({}))
    now = timezone.now()
    ChainAlert.objects.create(
        fingerprint="f", created_at=now, last_seen_at=now, message="run X event 3 broke"
    )
    assert "run X event 3 broke" in template.render(Context({}))


def test_values_beyond_64_bits_still_export(db: Any, tmp_path: Path) -> None:
    from audit.exports import ExportFilters, export_jsonl

    run_id = runs_bulk_create(runs=1, steps_per_run=1)[0]
    Run.objects.filter(pk=run_id).update(input={"order": 2**70})
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"".join(export_jsonl(filters=ExportFilters())))
    assert verify_export_file(path, load_public_key(PUBLIC_KEY)).ok
    assert json.loads(path.read_bytes().splitlines()[1])["run"]["input"] == {"order": 2**70}


def test_the_exports_page_tells_an_auditor_what_to_copy_to_verify_offline(
    client_for: Callable[[str], Client],
) -> None:
    from audit.verify import OFFLINE_FILES

    page = client_for("auditors").get("/audit/exports/").content.decode()

    assert "python -m audit.verify FILE --public-key KEY" in page
    assert "pip install cryptography" in page
    for path in OFFLINE_FILES:
        assert f"<li>{path}</li>" in page
