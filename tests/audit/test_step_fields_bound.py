"""Every field of a step is bound by its events: an edit of a step row is found by all four checks.

verify_journal, the dashboard's Verify button, the checkpoint job and the offline verifier of an
export each replay the run's events per step (intent, outcome, reconciliation, resolution) and
compare the result with the step rows, naming the step and the field that disagree.
"""

from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client

from audit.checkpoints import checkpoint_create
from audit.exports import ExportFilters, export_jsonl
from audit.models import ChainAlert
from audit.verify import load_public_key, verify_export_file
from runs.services.decisions import step_resolve
from tests.audit.conftest import PUBLIC_KEY
from tests.database import guards_off
from tests.review.factories import finish_run_as_worker, killed_support_run, user_in


@pytest.fixture
def resolved_run(db: Any) -> Iterator[str]:
    """Steps 0 (read, done), 1 (tickets.create, done), 2 (email.send, unknown, resolved sent)."""
    item = killed_support_run()
    step_resolve(
        run_id=item.run_id,
        index=2,
        action="sent",
        note="The email is in the outbox.",
        by="alice",
        result={"email": {"id": 7, "message_id": "<m7@example.com>"}},
    )
    finish_run_as_worker(item.run_id)
    yield item.run_id


def _verify_journal(run_id: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("verify_journal", "--run", run_id, stdout=out)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


def _dashboard_verify(run_id: str) -> str:
    client = Client()
    client.force_login(user_in("supervisors"))
    response = client.get(f"/runs/{run_id}/verify", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    return response.content.decode()


def _export_problems(run_id: str, tmp_path: Path) -> list[str]:
    path = tmp_path / f"{run_id}.jsonl"
    path.write_bytes(b"".join(export_jsonl(filters=ExportFilters(run_id=UUID(run_id)))))
    report = verify_export_file(path, load_public_key(PUBLIC_KEY))
    assert report.signed_manifest
    return [str(p) for p in report.problems]


def test_a_journalled_run_with_a_resolution_passes_all_four_checks(
    resolved_run: str, tmp_path: Path
) -> None:
    assert _verify_journal(resolved_run)[0] == 0
    assert "The chain holds" in _dashboard_verify(resolved_run)
    assert checkpoint_create().checkpoint is not None
    assert _export_problems(resolved_run, tmp_path) == []


EDITS = [
    ("result", "UPDATE runs_step SET result = '{\"ticket\": {\"id\": 99}}' WHERE index = 1", 1),
    ("arguments", "UPDATE runs_step SET arguments = '{\"to\": \"eve@example.com\"}' WHERE index = 2", 2),
    ("arguments_hash", "UPDATE runs_step SET arguments_hash = repeat('a', 64), arguments = '{}' WHERE index = 1", 1),
    ("state", "UPDATE runs_step SET state = 'error' WHERE index = 1", 1),
    ("usage", "UPDATE runs_step SET usage_input_tokens = 5 WHERE index = 0", 0),
    ("resolution", "UPDATE runs_step SET resolution_note = 'Never sent.' WHERE index = 2", 2),
    ("result", "UPDATE runs_step SET result = '{\"resolved_as\": \"sent\"}' WHERE index = 2", 2),
]  # fmt: skip


@pytest.mark.parametrize(
    ("field", "sql", "index"), EDITS, ids=[f"step {e[2]} {e[0]}" for e in EDITS]
)
def test_a_step_row_edited_in_the_database_is_named_by_every_check(
    resolved_run: str, tmp_path: Path, field: str, sql: str, index: int
) -> None:
    # a done step may not move (runs_step_state_guard); whoever edits rows by hand can switch
    # the guards off, as here, and the checks must still name the step
    guarded = ("runs_step",) if field == "state" else ()
    with connection.cursor() as cursor, guards_off(cursor, *guarded):
        cursor.execute(sql + " AND run_id = %s", [resolved_run])
        assert cursor.rowcount == 1
    named = f"step {index} {field} "

    code, output = _verify_journal(resolved_run)
    assert code == 1
    assert f"BROKEN run {resolved_run}" in output and named in output, output

    page = _dashboard_verify(resolved_run)
    assert "Chain broken" in page and named in page, page

    result = checkpoint_create()
    assert result.checkpoint is None
    alert = ChainAlert.objects.get()
    assert resolved_run in alert.message and named in alert.message, alert.message

    problems = _export_problems(resolved_run, tmp_path)
    assert any(resolved_run in p and named in p for p in problems), problems


def test_a_fork_and_a_cancelled_run_pass_all_four_checks_and_an_edited_copy_is_named(
    resolved_run: str, tmp_path: Path
) -> None:
    from runs.services.actions import run_cancel
    from runs.services.forks import run_fork

    fork = run_fork(
        run_id=resolved_run,
        index=3,
        by="ada",
        note="copy the resolved email",
        writes={"tickets.close": "again"},
    )
    cancelled = killed_support_run(customer="bob@example.com")
    run_cancel(run_id=cancelled.run_id, by="ada", note="duplicate ticket")
    for run_id in (str(fork.pk), resolved_run, cancelled.run_id):
        assert _verify_journal(run_id)[0] == 0, run_id
        assert "The chain holds" in _dashboard_verify(run_id)
        assert _export_problems(run_id, tmp_path) == [], run_id
    assert checkpoint_create().checkpoint is not None

    # the copy of the supervisor's resolution is bound in the fork's chain too
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_step SET resolution_note = 'Never sent.' WHERE index = 2 AND run_id = %s",
            [fork.pk],
        )
    named = "step 2 resolution "
    assert named in _verify_journal(str(fork.pk))[1]
    assert any(named in p for p in _export_problems(str(fork.pk), tmp_path))


def test_runs_that_used_approvals_pass_all_four_checks_and_an_edit_is_named(
    db: Any, tmp_path: Path
) -> None:
    """Approved (two people), denied and expired steps: verify_journal, Verify, the checkpoint
    job and the offline export verifier all replay the approval events; a denial's note edited
    in the database is named."""
    from runs import clock
    from runs.models import ApprovalRequest
    from runs.services.approvals import approvals_expire_due, step_approve, step_deny
    from tests.review.factories import run_awaiting_approval

    approved = run_awaiting_approval(agent="a1", approvals=2)
    step_approve(run_id=approved.run_id, index=1, by="sam")
    step_approve(run_id=approved.run_id, index=1, by="kim")
    denied = run_awaiting_approval(agent="a2")
    step_deny(run_id=denied.run_id, index=1, by="sam", note="wrong customer")
    expired = run_awaiting_approval(agent="a3", expires_after_seconds=600)
    ApprovalRequest.objects.filter(step__run_id=expired.run_id).update(expires_at=clock.now())
    assert approvals_expire_due() == 1
    runs = [approved.run_id, denied.run_id, expired.run_id]
    for run_id in runs:
        assert _verify_journal(run_id)[0] == 0
        assert "The chain holds" in _dashboard_verify(run_id)
    assert checkpoint_create().checkpoint is not None
    for run_id in runs:
        assert _export_problems(run_id, tmp_path) == []
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_step SET resolution_note = 'approved after all' "
            "WHERE run_id = %s AND index = 1",
            [denied.run_id],
        )
    code, out = _verify_journal(denied.run_id)
    assert code == 1 and "step 1 resolution" in out, out
