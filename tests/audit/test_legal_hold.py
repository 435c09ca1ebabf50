"""Legal hold: an admin keeps a run from retention, from its page or the command line.

The story: counsel asks that an old finished run be kept. An admin puts it on hold from the run's
page with a note; the page says since when and by whom; the run's chain records it (and still
verifies, offline too); the audit log has the entry; retention drops the run's month around it
and keeps the run. Once the hold is lifted, retention purges the run like any other. Supervisors
may not do it; neither may a hold be set twice.
"""

from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from audit.checkpoints import checkpoint_create
from audit.exports import ExportFilters, export_jsonl
from audit.models import RetentionPolicy
from audit.retention import retention_purge
from audit.verify import load_public_key, verify_export_file
from bench.testdata import runs_bulk_create
from dashboard.audit import AuditEntry
from runs.chain import run_chain_breaks
from runs.constants import EventType
from runs.models import Event, Run
from tests.audit.conftest import PUBLIC_KEY

NOTE = "Matter 2026-114: counsel asks us to keep this run"


def _old_runs(n: int) -> list[Any]:
    """n completed runs created 100 days ago (their month is past a 30-day policy)."""
    return runs_bulk_create(
        runs=n, steps_per_run=2, status="completed", created_at=timezone.now() - timedelta(days=300)
    )


def _hold(client: Client, run_id: Any, hold: str, note: str = NOTE) -> Any:
    return client.post(f"/audit/runs/{run_id}/legal-hold", {"hold": hold, "note": note})


def _verifies_offline(run_id: Any, tmp_path: Path) -> None:
    assert checkpoint_create().checkpoint is not None
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(export_jsonl(filters=ExportFilters(run_id=run_id))))
    report = verify_export_file(path, load_public_key(PUBLIC_KEY))
    assert report.ok, report.problems


def test_an_admin_holds_an_old_run_from_its_page_and_retention_keeps_it_until_lifted(
    client_for: Callable[[str], Client], tmp_path: Path
) -> None:
    RetentionPolicy.objects.create(pk=1, enabled=True, keep_days=200)
    held, other = _old_runs(2)
    admin = client_for("admins")
    page = admin.get(f"/runs/{held}/").content.decode()
    assert 'id="legal-hold-form"' in page and "Not on legal hold" in page

    response = _hold(admin, held, "on")

    assert response.status_code == 302 and response["Location"].endswith(
        f"/runs/{held}/#legal-hold"
    )
    run = Run.objects.get(pk=held)
    assert run.legal_hold and run.legal_hold_by == "admins-user" and run.legal_hold_note == NOTE
    page = admin.get(f"/runs/{held}/").content.decode()
    assert f"On legal hold since {run.legal_hold_at:%Y-%m-%d %H:%M} UTC by admins-user" in page
    assert NOTE in page and 'id="legal-hold-lift"' in page
    event = Event.objects.get(run_id=held, seq=run.event_seq)
    assert event.type == EventType.RUN_LEGAL_HOLD_SET and event.actor == "user:admins-user"
    assert event.payload == {"by": "admins-user", "note": NOTE}
    assert run_chain_breaks(run) == []
    _verifies_offline(held, tmp_path)
    entry = AuditEntry.objects.get(action="run.legal_hold")
    assert entry.actor_name == "admins-user" and entry.target == f"run:{held}"
    assert entry.note == NOTE and entry.details["event_seq"] == run.event_seq
    # the runs list finds it, and only it, by the filter
    listed = admin.get("/", {"legal_hold": "on"}).content.decode()
    assert f'data-run="{held}"' in listed and f'data-run="{other}"' not in listed

    kept = retention_purge()

    assert kept.purged == 1 and kept.kept == 1 and len(kept.months_dropped) == 1
    assert list(Run.objects.values_list("pk", flat=True)) == [held]
    assert run_chain_breaks(Run.objects.get(pk=held)) == []

    assert _hold(admin, held, "off", note="Matter closed").status_code == 302
    run = Run.objects.get(pk=held)
    assert not run.legal_hold and run.legal_hold_at is None and run.legal_hold_by == ""
    lifted = Event.objects.get(run_id=held, seq=run.event_seq)
    assert lifted.type == EventType.RUN_LEGAL_HOLD_LIFTED
    assert lifted.payload == {"by": "admins-user", "note": "Matter closed"}
    assert AuditEntry.objects.filter(action="run.legal_hold_lift").count() == 1
    assert "Not on legal hold" in admin.get(f"/runs/{held}/").content.decode()

    assert retention_purge().purged == 1
    assert not Run.objects.exists()


def test_a_supervisor_may_not_hold_a_run_and_sees_no_form(
    client_for: Callable[[str], Client],
) -> None:
    (run_id,) = _old_runs(1)
    supervisor = client_for("supervisors")
    assert 'id="legal-hold-form"' not in supervisor.get(f"/runs/{run_id}/").content.decode()

    assert _hold(supervisor, run_id, "on").status_code == 403

    run = Run.objects.get(pk=run_id)
    assert not run.legal_hold and run.event_seq == Event.objects.filter(run_id=run_id).count()
    assert not Event.objects.filter(run_id=run_id, type=EventType.RUN_LEGAL_HOLD_SET).exists()
    refused = AuditEntry.objects.get(action="access.refused")
    assert refused.details["permission"] == "manage_audit"
    assert not AuditEntry.objects.filter(action="run.legal_hold").exists()


def test_a_hold_needs_a_note_and_is_not_set_twice(client_for: Callable[[str], Client]) -> None:
    (run_id,) = _old_runs(1)
    admin = client_for("admins")
    seq = Run.objects.get(pk=run_id).event_seq

    _hold(admin, run_id, "on", note="  ")
    assert not Run.objects.get(pk=run_id).legal_hold
    _hold(admin, run_id, "off")  # not on hold: nothing to lift
    assert Run.objects.get(pk=run_id).event_seq == seq

    _hold(admin, run_id, "on")
    page = admin.get(_hold(admin, run_id, "on")["Location"]).content.decode()

    assert "already on legal hold since" in page and "(by admins-user)" in page
    assert Run.objects.get(pk=run_id).event_seq == seq + 1  # one event, not two
    assert AuditEntry.objects.filter(action="run.legal_hold").count() == 1


def test_the_command_holds_and_lifts_as_an_admin_only(user_in: Callable[[str], Any]) -> None:
    (run_id,) = _old_runs(1)
    user_in("admins")
    user_in("supervisors")
    out = StringIO()

    call_command(
        "legal_hold", str(run_id), "--on", "--note", NOTE, "--by", "admins-user", stdout=out
    )

    assert f"run {run_id} on legal hold by admins-user" in out.getvalue()
    run = Run.objects.get(pk=run_id)
    assert run.legal_hold and run.legal_hold_by == "admins-user"
    assert AuditEntry.objects.get(action="run.legal_hold").actor_name == "admins-user"
    with pytest.raises(CommandError, match="legal_hold_unchanged"):
        call_command("legal_hold", str(run_id), "--on", "--note", NOTE, "--by", "admins-user")
    with pytest.raises(CommandError, match="admins only"):
        call_command("legal_hold", str(run_id), "--off", "--note", "x", "--by", "supervisors-user")
    with pytest.raises(CommandError, match="No user"):
        call_command("legal_hold", str(run_id), "--off", "--note", "x", "--by", "nobody")

    call_command("legal_hold", str(run_id), "--off", "--note", "closed", "--by", "admins-user")

    assert not Run.objects.get(pk=run_id).legal_hold
    assert run_chain_breaks(Run.objects.get(pk=run_id)) == []
