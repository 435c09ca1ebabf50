"""Hostile data on the human side: rendered escaped in the dashboard, no path tricks in exports."""

import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.test import Client
from rest_framework.test import APIClient

from tests.runs.journal_client import JournalClient

XSS = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'
SQL = "'; DROP TABLE runs_event; --"


@pytest.fixture
def signing_key(settings: Any) -> None:
    from audit.signing import private_key_generate

    settings.AUDIT_SIGNING_KEY = private_key_generate()


@pytest.fixture
def hostile_run(api: APIClient) -> str:
    journal = JournalClient(api)
    run = journal.create(agent="support", external_id=XSS, input={"subject": XSS, "q": SQL})
    epoch = journal.lease(run["id"], worker=XSS).json()["epoch"]
    assert journal.intent(run["id"], epoch, 0, name=XSS, arguments={"body": XSS}).status_code == 201
    assert (
        journal.outcome(run["id"], epoch, 0, result={"reply": XSS, "sql": SQL}).status_code == 200
    )
    return str(run["id"])


def _as(group: str, username: str) -> Client:
    from tests.review.factories import user_in

    client = Client()
    client.force_login(user_in(group, username))
    return client


def test_html_and_sql_in_journal_data_render_escaped_on_every_page(
    hostile_run: str, signing_key: None
) -> None:
    client = _as("supervisors", "xss-sup")
    for path in ["/", f"/runs/{hostile_run}/", "/?q=" + XSS]:
        response = client.get(path)
        assert response.status_code == 200, path
        html = response.content.decode()
        assert "<script>alert" not in html, path
        assert "onerror=alert" not in html.replace("onerror=alert(1)&gt;", ""), path
    transcript = client.get(f"/runs/{hostile_run}/").content.decode()
    assert "&lt;script&gt;alert(" in transcript  # shown, as text


def test_exports_carry_hostile_data_as_data(hostile_run: str, signing_key: None) -> None:
    client = _as("auditors", "xss-auditor")
    response = client.get(f"/audit/runs/{hostile_run}/export?format=jsonl")
    assert response.status_code == 200
    body = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    records = [json.loads(line) for line in body.splitlines() if line.strip()]
    run_record = next(r for r in records if r.get("kind") == "run")
    assert run_record["run"]["external_id"] == XSS
    assert run_record["run"]["input"] == {"subject": XSS, "q": SQL}
    assert run_record["steps"][0]["name"] == XSS
    disposition = response["Content-Disposition"]
    assert "/" not in disposition.split("filename=")[1]
    assert ".." not in disposition


@pytest.mark.parametrize(
    "path",
    [
        "/audit/exports/..%2F..%2F..%2Fetc%2Fpasswd/download",
        "/audit/exports/../../etc/passwd/download",
        "/audit/exports/%2e%2e%2f%2e%2e%2fsettings.py/download",
        "/audit/runs/../../config/settings.py/export",
        "/static/..%2F..%2Fconfig%2Fsettings.py",
        "/static/../config/settings.py",
    ],
)
def test_path_traversal_in_export_and_static_names_finds_nothing(
    db: Any, path: str, signing_key: None
) -> None:
    client = _as("auditors", "traversal-auditor")
    response = client.get(path)
    assert response.status_code in (400, 404), (path, response.status_code)
    content = b"".join(getattr(response, "streaming_content", [response.content]))
    assert b"SECRET_KEY" not in content and b"root:" not in content


@pytest.mark.parametrize("fmt", ["../../../../tmp/x", "jsonl/../../x", "csv\x00", "JSONL"])
def test_an_export_format_that_is_not_one_of_ours_is_refused(
    hostile_run: str, fmt: str, signing_key: None
) -> None:
    client = _as("auditors", "format-auditor")
    response = client.get(f"/audit/runs/{hostile_run}/export", {"format": fmt})
    assert response.status_code in (400, 404)


def test_an_export_job_file_lives_in_the_export_directory_whatever_the_filters(
    db: Any, signing_key: None
) -> None:
    from audit.exports import export_filters_parse, export_job_create
    from tests.review.factories import user_in

    user = user_in("auditors", "job-auditor")
    filters = export_filters_parse(agent="../../../../etc/passwd", status="")
    job = export_job_create(user=user, filters=filters, format="jsonl")
    export_dir = Path(django_settings.AUDIT_EXPORT_DIR).resolve()
    assert job.path.resolve().parent == export_dir
    assert ".." not in job.file_name and "/" not in job.file_name


@pytest.mark.parametrize("agent", ["../../etc/passwd", "a\x00b", XSS, SQL])
def test_the_export_form_takes_hostile_filters_as_data_never_a_500(
    db: Any, agent: str, signing_key: None
) -> None:
    client = _as("auditors", "form-auditor")
    response = client.post("/audit/exports/", {"agent": agent, "format": "jsonl"})
    assert response.status_code in (200, 302, 400), response.status_code
    if response.status_code == 200:
        body = b"".join(response.streaming_content)  # type: ignore[attr-defined]
        assert body == b"" or body.startswith(b"{")
