"""Run actions through the dashboard: admins only, a note each, audited, an event in the chain."""

from typing import Any

import pytest
from django.test import Client

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, AUDITORS, SUPERVISORS
from runs.constants import EventType, RunStatus
from runs.models import Event, Run, Step
from tests.console.factories import evicted_at_step_12, journalled_run
from tests.review.factories import killed_support_run

pytestmark = pytest.mark.django_db


def _messages(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def test_an_admin_cancels_a_run_with_a_note_and_it_is_audited_and_chained(
    client_for: Any,
) -> None:
    run, _ = journalled_run(3)
    admin = client_for(ADMINS, username="ada")
    page = admin.get(f"/runs/{run.pk}/")
    assert b'id="cancel-run"' in page.content and b'id="fork-run"' in page.content

    done = admin.post(f"/console/runs/{run.pk}/cancel", {"note": "customer withdrew"}, follow=True)

    assert "Run cancelled: its worker's next write is refused." in _messages(done)
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED
    entry = AuditEntry.objects.get(action="run.cancel")
    assert (entry.actor_name, entry.target, entry.note) == (
        "ada",
        f"run:{run.pk}",
        "customer withdrew",
    )
    assert Event.objects.filter(run=run, type=EventType.RUN_CANCELLED).count() == 1
    assert b'id="cancel-run"' not in done.content  # a final run offers no cancel
    assert b"cancelled by ada: customer withdrew" in done.content  # lease and recovery history


def test_cancel_without_a_note_or_of_a_finished_run_says_why(client_for: Any) -> None:
    run, _ = journalled_run(1)
    admin = client_for(ADMINS)
    no_note = admin.post(f"/console/runs/{run.pk}/cancel", {"note": ""}, follow=True)
    assert any("note is required" in m for m in _messages(no_note))
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING
    admin.post(f"/console/runs/{run.pk}/cancel", {"note": "stop"})
    again = admin.post(f"/console/runs/{run.pk}/cancel", {"note": "stop again"}, follow=True)
    assert any("already cancelled" in m for m in _messages(again))
    assert AuditEntry.objects.filter(action="run.cancel").count() == 1
    unknown = admin.post("/console/runs/00000000-0000-0000-0000-000000000000/cancel", {"note": "x"})
    assert unknown.status_code == 404


@pytest.mark.parametrize("group", [SUPERVISORS, AUDITORS, None])
def test_only_admins_may_act_on_runs(client_for: Any, group: str | None) -> None:
    run, _ = journalled_run(2)
    client: Client = client_for(group)
    assert client.post(f"/console/runs/{run.pk}/cancel", {"note": "x"}).status_code == 403
    assert client.post(f"/console/runs/{run.pk}/fork", {"index": 1, "note": "x"}).status_code == 403
    assert client.get("/console/bulk/").status_code == 403
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING
    if group:
        page = client.get(f"/runs/{run.pk}/")
        assert b'id="cancel-run"' not in page.content and b'id="fork-run"' not in page.content


def test_an_admin_forks_a_run_and_lineage_shows_both_ways(client_for: Any) -> None:
    run, _ = journalled_run(6)
    admin = client_for(ADMINS, username="ada")
    made = admin.post(
        f"/console/runs/{run.pk}/fork",
        {"index": 4, "note": "what if", "write:tickets.comment": "again"},
        follow=True,
    )
    fork = Run.objects.get(forked_from=run)
    assert made.redirect_chain[-1][0] == f"/runs/{fork.pk}/"
    assert b'id="forked-from"' in made.content
    assert b"4 steps copied from the original, never executed here" in made.content
    original = admin.get(f"/runs/{run.pk}/")
    assert f'href="/runs/{fork.pk}/"'.encode() in original.content
    assert b"forked at step 4 by ada: what if" in original.content
    assert AuditEntry.objects.get(action="run.fork").details["fork_run_id"] == str(fork.pk)
    verified = admin.get(f"/runs/{fork.pk}/verify", HTTP_HX_REQUEST="true")
    assert b"The chain holds" in verified.content


@pytest.mark.parametrize(("index", "why"), [(7, "not 7"), (-1, "0 or more")])
def test_a_fork_index_outside_the_journal_is_a_form_error(
    client_for: Any, index: int, why: str
) -> None:
    run, _ = journalled_run(6)
    admin = client_for(ADMINS)
    refused = admin.post(f"/console/runs/{run.pk}/fork", {"index": index, "note": "x"}, follow=True)
    assert any(why in m for m in _messages(refused)), _messages(refused)
    assert not Run.objects.filter(forked_from=run).exists()


def test_a_fork_over_an_unknown_step_is_refused_with_the_step(client_for: Any) -> None:
    item = killed_support_run()
    refused = client_for(ADMINS).post(
        f"/console/runs/{item.run_id}/fork", {"index": 3, "note": "x"}, follow=True
    )
    assert any("Step 2 is unknown" in m for m in _messages(refused))


def test_bulk_cancel_of_twenty_runs_shows_the_count_and_needs_the_confirmation(
    client_for: Any,
) -> None:
    runs = [journalled_run(1, agent="bulk-agent")[0] for _ in range(20)]
    finished, _ = journalled_run(0, agent="bulk-agent")
    admin = client_for(ADMINS, username="ada")
    admin.post(f"/console/runs/{finished.pk}/cancel", {"note": "already"})

    confirm = admin.get("/console/bulk/?agent=bulk-agent&action=cancel")
    assert confirm.status_code == 200
    assert b'<strong id="bulk-count">20</strong>' in confirm.content
    stale = admin.post(
        "/console/bulk/?agent=bulk-agent",
        {"action": "cancel", "note": "incident 42", "expected": 19},
        follow=True,
    )
    assert any("selects 20 runs now, not the 19" in m for m in _messages(stale))
    assert not Run.objects.filter(pk__in=[r.pk for r in runs], status="cancelled").exists()

    done = admin.post(
        "/console/bulk/?agent=bulk-agent",
        {"action": "cancel", "note": "incident 42", "expected": 20},
        follow=True,
    )
    assert "Cancelled 20 runs." in _messages(done)
    assert Run.objects.filter(pk__in=[r.pk for r in runs], status="cancelled").count() == 20
    assert AuditEntry.objects.filter(action="run.cancel").count() == 21
    bulk = AuditEntry.objects.get(action="run.bulk.cancel")
    assert bulk.details["confirmed"] == 20 and len(bulk.details["done"]) == 20
    assert b'<strong id="bulk-count">0</strong>' in done.content


def test_bulk_resume_takes_only_crash_looped_runs(client_for: Any) -> None:
    from tests.review.factories import crash_looped_run

    looped = crash_looped_run()
    killed_support_run(agent="looper")  # in review, but with an unknown step: not resumable
    admin = client_for(ADMINS)
    confirm = admin.get("/console/bulk/?agent=looper&action=resume")
    assert b'<strong id="bulk-count">1</strong>' in confirm.content
    done = admin.post(
        "/console/bulk/?agent=looper",
        {"action": "resume", "note": "fixed the crash", "expected": 1},
        follow=True,
    )
    assert "Resumed 1 run." in _messages(done)
    assert Run.objects.get(pk=looped.pk).status == RunStatus.RUNNING


def test_the_transcript_timeline_marks_the_crash_and_13_replayed_steps(client_for: Any) -> None:
    run = evicted_at_step_12()
    page = client_for(SUPERVISORS).get(f"/runs/{run.pk}/")
    html = page.content.decode()
    assert 'data-replayed="13"' in html and 'data-crashes="1"' in html
    assert html.count('data-replayed="1"') == 13
    assert "13 steps replayed, not redone" in html
    assert 'class="tl-mark tl-crash"' in html and 'class="tl-mark tl-recovery"' in html
    assert 'id="conversation"' in html
    assert Step.objects.filter(run=run).count() == 20


def test_the_timeline_refreshes_with_the_live_part_while_the_run_is_live(
    client_for: Any,
) -> None:
    run, epoch = journalled_run(2)
    client = client_for(SUPERVISORS)
    live = client.get(f"/runs/{run.pk}/?part=live", HTTP_HX_REQUEST="true")
    assert live.status_code == 200 and b'id="timeline"' in live.content
    assert live.content.count(b'class="tl-step') == 2
    from tests.console.factories import write_step

    write_step(run.pk, epoch, 2)
    again = client.get(f"/runs/{run.pk}/?part=live", HTTP_HX_REQUEST="true")
    assert again.content.count(b'class="tl-step') == 3
