"""A pack is one team's, and an incident holds one team's runs (issue 47 on issue 48's evidence).

Two teams at work: the support desk (`default`) with a person's decision on an evicted run, its
budget policy and an incident; billing with its own runs, token, approval rule, incident and
supervisor. Billing's pack holds billing's work and people and nothing of support's, and still
verifies offline; the auditors' page builds the pack of the auditor's own team.
"""

import csv
import io
import json
import zipfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone

from audit.evidence_verify import verify_pack
from audit.exports import export_job_run
from audit.incidents import incident_open
from audit.models import ExportJob, Incident, IncidentRun, IncidentSeverity
from audit.verify import load_public_key
from bench.testdata import runs_bulk_create
from dashboard.roles import AUDITORS, SUPERVISORS
from review.services.policies import budget_policy_save
from review.services.resolutions import review_step_resolve
from runs.api_errors import ApplicationError
from runs.models import ApprovalRule, BudgetPolicy
from teams.scope import team_scope
from teams.services import grant_role
from tests.audit.conftest import PUBLIC_KEY
from tests.review.factories import PASSWORD, killed_support_run, user_in
from tests.teams.conftest import World, world_of

pytestmark = pytest.mark.django_db


def _day_at_two_desks() -> tuple[World, dict[str, Any]]:
    """Support's day (default) and billing's, each with its own work and people."""
    avery = user_in(SUPERVISORS, "avery")
    auditor = user_in(AUDITORS, "audrey")
    support_runs = runs_bulk_create(runs=2, steps_per_run=2, agent="support")
    evicted = killed_support_run(customer="ada@example.com")
    review_step_resolve(user=avery, run_id=evicted.run_id, index=2, action="sent", note="seen")
    budget_policy_save(
        user="tests",
        policy=None,
        values={
            "name": "support desk",
            "agent": "support",
            "max_steps": 20,
            "max_tokens": 10_000,
            "max_wall_seconds": 3600,
            "max_recoveries": 3,
        },
    )
    support_incident = incident_open(
        user=auditor,
        run_ids=[support_runs[0]],
        title="Support mail to the wrong customer",
        severity=IncidentSeverity.SERIOUS,
        aware_at=timezone.now() - timedelta(hours=1),
    )
    billing = world_of("billing")  # its token, rule, incident, supervisor and one run
    billing_runs = runs_bulk_create(
        runs=3, steps_per_run=2, agent="invoices", team_id=billing.team.pk
    )
    return billing, {
        "support_runs": {str(r) for r in support_runs} | {str(evicted.run_id)},
        "billing_runs": {str(r) for r in billing_runs} | {str(billing.run.pk)},
        "support_incident": support_incident.pk,
    }


def _pack(tmp_path: Path, *team: str) -> Path:
    today = timezone.now().date()
    path = tmp_path / f"pack-{'-'.join(team) or 'none'}.zip"
    out = io.StringIO()
    call_command(
        "evidence_pack", "--from", str(today - timedelta(days=1)), "--to", str(today),
        *(("--team", team[0]) if team else ()), "-o", str(path), stdout=out,
    )  # fmt: skip
    return path


def _files(path: Path) -> dict[str, str]:
    with zipfile.ZipFile(path) as z:
        return {name: z.read(name).decode() for name in z.namelist()}


def _run_ids(files: dict[str, str]) -> set[str]:
    lines = [json.loads(line) for line in files["runs.jsonl"].splitlines()]
    return {line["run"]["id"] for line in lines if line.get("kind") == "run"}


def test_billings_pack_holds_billings_work_and_people_and_nothing_of_supports(
    tmp_path: Path,
) -> None:
    billing, facts = _day_at_two_desks()

    path = _pack(tmp_path, "billing")

    report = verify_pack(str(path), [load_public_key(PUBLIC_KEY)])
    assert report.ok, report
    manifest = report.manifest
    assert manifest["team"] == {"id": billing.team.pk, "slug": "billing", "name": "Billing"}
    assert manifest["filters"]["team"] == "billing"
    files = _files(path)
    assert _run_ids(files) == facts["billing_runs"]
    decisions = list(csv.DictReader(io.StringIO(files["decisions.csv"])))
    assert {d["run_id"] for d in decisions} <= facts["billing_runs"]
    people = {row["username"] for row in csv.DictReader(io.StringIO(files["people.csv"]))}
    assert people == {"billing-supervisor"}
    policies = json.loads(files["policies.json"])
    with team_scope(billing.team.pk):
        billing_policies = set(BudgetPolicy.objects.values_list("pk", flat=True))
        billing_rules = set(ApprovalRule.objects.values_list("pk", flat=True))
    assert {p["id"] for p in policies["budget_policies_now"]} == billing_policies
    assert {r["id"] for r in policies["approval_rules_now"]} == billing_rules
    [incident] = json.loads(files["incidents.json"])
    assert incident["runs"] == [str(billing.run.pk)]
    assert "billing" in files["README.md"]
    # no identifier of support's anywhere in the pack: runs, people, its policy, its incident
    everything = "\n".join(files.values())
    for run_id in facts["support_runs"]:
        assert run_id not in everything
    for word in ("avery", "audrey", "support desk", "Support mail to the wrong customer"):
        assert word not in everything, word


def test_supports_pack_keeps_its_decisions_and_leaves_billing_out(tmp_path: Path) -> None:
    _, facts = _day_at_two_desks()

    path = _pack(tmp_path, "default")

    assert verify_pack(str(path), [load_public_key(PUBLIC_KEY)]).ok
    files = _files(path)
    assert _run_ids(files) == facts["support_runs"]
    decisions = list(csv.DictReader(io.StringIO(files["decisions.csv"])))
    assert {d["run_id"] for d in decisions} <= facts["support_runs"]
    [avery] = [d for d in decisions if d["by"] == "avery"]
    assert avery["role"] == "supervisors"
    people = {row["username"] for row in csv.DictReader(io.StringIO(files["people.csv"]))}
    assert {"avery", "audrey"} <= people and "billing-supervisor" not in people
    assert [i["id"] for i in json.loads(files["incidents.json"])] == [facts["support_incident"]]
    everything = "\n".join(files.values())
    for run_id in facts["billing_runs"]:
        assert run_id not in everything
    assert "refund.*" not in everything and "billing-worker" not in everything


def test_with_two_teams_the_command_asks_which_teams_pack(tmp_path: Path) -> None:
    world_of("billing")
    with pytest.raises(CommandError, match="name the team \\(one of billing, default\\)"):
        _pack(tmp_path)
    with pytest.raises(CommandError, match="No team 'returns'"):
        _pack(tmp_path, "returns")


def test_an_auditor_of_billing_builds_billings_pack_from_the_page(tmp_path: Path) -> None:
    billing, facts = _day_at_two_desks()
    bea = user_in(None, "bea")
    grant_role(bea, billing.team, "auditor", actor="tests")
    client = Client()
    assert client.login(username="bea", password=PASSWORD)
    today = timezone.now().date()

    response = client.post(
        "/audit/evidence/",
        {"period_from": str(today - timedelta(days=1)), "period_to": str(today)},
    )

    job = ExportJob.objects.get(format="evidence")
    assert response.status_code == 302, response.content.decode()[:500]
    assert (job.team_id, job.filters["team"], job.total_runs) == (billing.team.pk, "billing", 4)
    export_job_run(job_id=job.pk)  # what the Celery task does, under the job's team
    job.refresh_from_db()
    download = client.get(f"/audit/exports/{job.pk}/download")
    path = tmp_path / "billing.zip"
    path.write_bytes(b"".join(download.streaming_content))  # type: ignore[attr-defined]
    report = verify_pack(str(path), [load_public_key(PUBLIC_KEY)])
    assert report.ok and report.manifest["team"]["slug"] == "billing"
    assert _run_ids(_files(path)) == facts["billing_runs"]
    # and support's pack is not hers to ask for: a team she is not in is no team at all
    refused = client.post(
        "/audit/evidence/",
        {"period_from": str(today), "period_to": str(today), "team": "default"},
    )
    assert refused.status_code == 400
    assert ExportJob.objects.filter(format="evidence").count() == 1


def test_an_incident_is_its_runs_team_and_holds_no_other_teams_run() -> None:
    billing, facts = _day_at_two_desks()
    auditor = user_in(AUDITORS, "audrey")
    support_run, billing_run = sorted(facts["support_runs"])[0], str(billing.run.pk)

    with pytest.raises(ApplicationError, match="runs of one team"):
        incident_open(
            user=auditor,
            run_ids=[support_run, billing_run],
            title="Both desks",
            severity=IncidentSeverity.SERIOUS,
            aware_at=timezone.now(),
        )
    assert not Incident.objects.filter(title="Both desks").exists()

    incident = incident_open(
        user=auditor,
        run_ids=[billing_run],
        title="Billing only",
        severity=IncidentSeverity.SERIOUS,
        aware_at=timezone.now(),
    )
    assert incident.team_id == billing.team.pk
    # the database holds it whoever writes the row: a support run in billing's incident fails
    with pytest.raises(IntegrityError, match="is of team"), transaction.atomic():
        IncidentRun.objects.create(incident=incident, run_id=support_run, team_id=billing.team.pk)
    with pytest.raises(IntegrityError, match="not visible"), transaction.atomic():
        IncidentRun.objects.create(incident=incident, run_id="00000000-0000-0000-0000-000000000000")
    assert list(IncidentRun.objects.filter(incident=incident).values_list("run_id", flat=True)) == [
        billing.run.pk
    ]


def test_the_incident_page_refuses_runs_of_two_teams(
    client_for: Callable[[str], Client],
) -> None:
    billing, facts = _day_at_two_desks()
    auditor = client_for("auditors")
    support_run = sorted(facts["support_runs"])[0]

    response = auditor.post(
        "/audit/incidents/",
        {
            "title": "Both desks",
            "severity": "serious",
            "aware_at": timezone.now().strftime("%Y-%m-%dT%H:%M"),
            "runs": f"{support_run}, {billing.run.pk}",
        },
    )

    # the auditor is in support only: billing's run is no run at all to them
    assert response.status_code == 400
    assert "No such run" in response.content.decode()
    assert not Incident.objects.filter(title="Both desks").exists()
