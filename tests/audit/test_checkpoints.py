"""Signed checkpoints: they chain, they verify, and they refuse to sign over an edited history."""

import base64
import hashlib
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from audit.checkpoints import checkpoint_create
from audit.exports import ExportFilters, export_jsonl
from audit.merkle import leaf_hash, root_from_path
from audit.models import ChainAlert, Checkpoint, CheckpointLeaf
from audit.verify import load_public_key, verify_export_file
from bench.testdata import runs_bulk_create
from runs.canonical import GENESIS_HASH, canonical_json
from runs.models import Event
from tests.audit.conftest import PUBLIC_KEY
from tests.database import guards_off
from tests.runs.journal_client import JournalClient


def test_each_checkpoint_signs_the_new_heads_and_names_the_previous_one(db: Any) -> None:
    first_runs = runs_bulk_create(runs=20, steps_per_run=3)
    first = checkpoint_create().checkpoint
    assert first is not None
    assert first.seq == 1 and first.prev_hash == GENESIS_HASH and first.leaves == 20

    runs_bulk_create(runs=5, steps_per_run=2)
    second = checkpoint_create().checkpoint
    assert second is not None
    assert second.seq == 2 and second.prev_hash == first.hash
    assert second.leaves == 5  # only the heads that changed since checkpoint 1
    assert second.runs_verified == 25

    public_key = load_public_key(PUBLIC_KEY)
    for checkpoint in (first, second):
        assert hashlib.sha256(canonical_json(checkpoint.statement)).hexdigest() == checkpoint.hash
        public_key.verify(
            base64.b64decode(checkpoint.signature), canonical_json(checkpoint.statement)
        )

    # a run's leaf and path lead to the signed root
    leaf = CheckpointLeaf.objects.get(run_id=first_runs[7])
    root = root_from_path(
        leaf=leaf_hash(run_id=str(leaf.run_id), seq=leaf.event_seq, head=leaf.head),
        index=leaf.position,
        size=first.leaves,
        path=[bytes.fromhex(h) for h in leaf.path_hex()],
    )
    assert root == first.root


def test_a_journalled_run_exports_and_verifies(api: APIClient, tmp_path: Any) -> None:
    """Real services, real timestamps: the offline verifier rebuilds the journal's own hashes."""
    journal = JournalClient(api)
    run = journal.create(external_id="ticket-77")
    epoch = journal.lease(run["id"]).json()["epoch"]
    journal.write_step(run["id"], epoch, 0, tokens=10)
    assert journal.read(run["id"], epoch, 1, tokens=5).status_code == 201
    assert checkpoint_create().checkpoint is not None
    journal.write_step(run["id"], epoch, 2, tokens=3)  # after the checkpoint: not yet covered

    path = tmp_path / "one.jsonl"
    path.write_bytes(b"".join(export_jsonl(filters=ExportFilters())))
    report = verify_export_file(path, load_public_key(PUBLIC_KEY))
    assert report.ok, report.problems
    assert report.runs == 1 and report.runs_covered == 1
    assert report.events_uncovered == 2  # step 2's intent and outcome


def _edit_event_behind_the_apps_back(run_id: Any, seq: int) -> None:
    """What an attacker with database access does: skip the trigger, rewrite one payload."""
    with connection.cursor() as cursor, guards_off(cursor, "runs_event"):
        cursor.execute(
            "UPDATE runs_event SET payload = jsonb_set(payload, '{name}', '\"tickets.delete\"') "
            "WHERE run_id = %s AND seq = %s",
            [run_id, seq],
        )


def test_the_append_only_trigger_refuses_an_ordinary_update(db: Any) -> None:
    from django.db import DatabaseError, transaction

    run_id = runs_bulk_create(runs=1, steps_per_run=1)[0]
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        Event.objects.filter(run_id=run_id, seq=1).update(actor="someone-else")


def test_a_database_level_edit_is_found_and_the_checkpoint_refuses_with_an_alert(
    db: Any, client_for: Callable[[str], Client]
) -> None:
    runs = runs_bulk_create(runs=30, steps_per_run=3)
    assert checkpoint_create().checkpoint is not None
    victim = runs[17]
    _edit_event_behind_the_apps_back(victim, 3)
    assert Event.objects.get(run_id=victim, seq=3).payload["name"] == "tickets.delete"

    out = StringIO()
    with pytest.raises(SystemExit) as exit_info:
        call_command("verify_journal", stdout=out)
    assert exit_info.value.code == 1
    assert f"BROKEN run {victim} event 3: hash does not match" in out.getvalue()

    result = checkpoint_create()
    assert result.checkpoint is None
    assert Checkpoint.objects.count() == 1  # nothing signed over the broken chain
    alert = ChainAlert.objects.get()
    assert alert.breaks[0] == {
        "run": str(victim),
        "event": 3,
        "problem": "hash does not match the event's content",
    }
    assert str(victim) in alert.message

    again = checkpoint_create()  # the next beat: still refused, the same alert counted again
    assert again.checkpoint is None
    alert.refresh_from_db()
    assert alert.times_seen == 2 and ChainAlert.objects.count() == 1

    auditor = client_for("auditors")
    for page in ("/audit/checkpoints/", "/audit/exports/"):
        response = auditor.get(page)
        assert response.status_code == 200
        body = response.content.decode()
        assert "Hash chain broken." in body and str(victim) in body

    # the command the operators run says the same, and exits 1
    err = StringIO()
    with pytest.raises(SystemExit):
        call_command("audit_checkpoint", stdout=StringIO(), stderr=err)
    assert "refused" in err.getvalue()


def test_admins_acknowledge_an_alert_with_a_note(
    db: Any, client_for: Callable[[str], Client]
) -> None:
    from dashboard.audit import AuditEntry

    runs = runs_bulk_create(runs=3, steps_per_run=1)
    _edit_event_behind_the_apps_back(runs[0], 3)
    alert = checkpoint_create().alert
    assert alert is not None
    admin = client_for("admins")
    assert admin.post(f"/audit/alerts/{alert.pk}/acknowledge", {"note": ""}).status_code == 302
    alert.refresh_from_db()
    assert alert.acknowledged_at is None  # a note is required
    admin.post(f"/audit/alerts/{alert.pk}/acknowledge", {"note": "Restored from backup."})
    alert.refresh_from_db()
    assert alert.acknowledged_by == "admins-user"
    assert AuditEntry.objects.filter(action="audit.alert_acknowledge").count() == 1


def test_export_rows_render_exactly_like_the_journal_api(db: Any) -> None:
    """The export reads plain rows for speed; they must render as runs.representations does."""
    from runs.chain import EVENT_COLUMNS, STEP_COLUMNS, EventRow, StepRow
    from runs.models import Step
    from runs.representations import event_json, step_json

    run_id = runs_bulk_create(runs=10, steps_per_run=3)[0]  # run 0 has a resolved step
    steps = Step.objects.filter(run_id=run_id).order_by("index")
    step_rows = steps.values_list(*STEP_COLUMNS)
    assert [step_json(StepRow(*r)) for r in step_rows] == [step_json(s) for s in steps]
    assert step_json(steps[2])["resolution"] is not None
    events = Event.objects.filter(run_id=run_id).order_by("seq")
    event_rows = events.values_list(*EVENT_COLUMNS)
    assert [event_json(EventRow(*r)) for r in event_rows] == [event_json(e) for e in events]


def test_after_a_key_rotation_the_export_verifies_with_both_public_keys(
    db: Any, settings: Any, tmp_path: Any
) -> None:
    from audit.signing import private_key_generate, private_key_parse, public_key_text

    ids = runs_bulk_create(runs=3, steps_per_run=1)
    assert checkpoint_create().checkpoint is not None  # signed with the session key
    new_key = private_key_generate()
    settings.AUDIT_SIGNING_KEY = new_key
    new_public = public_key_text(private_key_parse(new_key).public_key())
    path = tmp_path / "rotated.jsonl"
    path.write_bytes(b"".join(export_jsonl(filters=ExportFilters(run_id=ids[0]))))

    only_new = verify_export_file(path, load_public_key(new_public))
    assert not only_new.ok
    assert any("checkpoint 1: signature does not verify" in p.message for p in only_new.problems)
    both = verify_export_file(path, [load_public_key(new_public), load_public_key(PUBLIC_KEY)])
    assert both.ok, both.problems


def _rewrite_chain_with_recomputed_hashes(run_id: Any, *, from_seq: int) -> None:
    """A careful attacker: edit one event, recompute every hash after it and the run's head."""
    from runs.canonical import event_body, event_hash
    from runs.models import Run

    with connection.cursor() as cursor, guards_off(cursor, "runs_event"):
        cursor.execute(
            "UPDATE runs_event SET actor = 'worker:mallory' WHERE run_id = %s AND seq = %s",
            [run_id, from_seq],
        )
        prev = Event.objects.get(run_id=run_id, seq=from_seq - 1).hash
        for event in Event.objects.filter(run_id=run_id, seq__gte=from_seq).order_by("seq"):
            body = event_body(
                run_id=run_id,
                seq=event.seq,
                type=event.type,
                payload=event.payload,
                actor=event.actor,
                at=event.at,
            )
            digest = event_hash(prev_hash=prev, body=body)
            cursor.execute(
                "UPDATE runs_event SET prev_hash = %s, hash = %s WHERE id = %s",
                [prev, digest, event.pk],
            )
            prev = digest
        cursor.execute("UPDATE runs_run SET event_head = %s WHERE id = %s", [prev, run_id])
    assert Run.objects.get(pk=run_id).event_head == prev


def test_a_chain_rewritten_with_recomputed_hashes_is_named_by_the_next_checkpoint(
    db: Any,
) -> None:
    runs = runs_bulk_create(runs=5, steps_per_run=3)
    assert checkpoint_create().checkpoint is not None
    victim = runs[3]
    _rewrite_chain_with_recomputed_hashes(victim, from_seq=2)

    # the rewritten chain holds together on its own: only the signed head can tell
    out = StringIO()
    call_command("verify_journal", "--run", str(victim), stdout=out)
    assert "0 breaks" in out.getvalue()

    result = checkpoint_create()
    assert result.checkpoint is None
    assert Checkpoint.objects.count() == 1
    alert = ChainAlert.objects.get()
    assert alert.breaks == [
        {
            "run": str(victim),
            "event": 9,
            "problem": "event 9 is not the one checkpoint 1 signed: the chain was rewritten",
        }
    ]
    assert str(victim) in alert.message
