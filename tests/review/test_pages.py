"""What the pages show: runs filters and search, status counts, live polling that stops, verify."""

from pathlib import Path

import pytest
from django.test import Client

from dashboard.roles import AUDITORS, SUPERVISORS
from runs.models import BudgetPolicy, Run
from runs.services.creation import run_create
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record
from tests.review.factories import killed_support_run, user_in


def _client(group: str = AUDITORS) -> Client:
    client = Client()
    client.force_login(user_in(group))
    return client


def _ids(response) -> set[str]:
    return {str(row["run"].pk) for row in response.context["rows"]}


@pytest.fixture
def runs(groups) -> dict[str, Run]:
    BudgetPolicy.objects.get_or_create(
        agent="tight",
        defaults={
            "name": "tight",
            "max_steps": 5,
            "max_tokens": 1000,
            "max_wall_seconds": 3600,
            "max_recoveries": 2,
        },
    )
    review = killed_support_run(external_id="ticket-7")
    pending, _ = run_create(agent="search", input={}, actor="w")
    busy, _ = run_create(agent="tight", input={}, actor="w")
    grant = run_lease_acquire(run_id=busy.pk, worker="w", ttl_seconds=30, actor="w")
    for i in range(4):  # 4 of 5 steps: 80 %
        step_intent_record(
            run_id=busy.pk,
            epoch=grant.epoch,
            index=i,
            kind="model",
            name="model.chat",
            effect="read",
            arguments={"i": i},
            outcome={"status": "ok", "result": {}, "usage": {"input_tokens": 1}},
            actor="w",
        )
    return {"review": review.run, "pending": pending, "busy": busy}


@pytest.mark.django_db
def test_runs_list_filters_and_search(runs):
    client = _client()
    everything = {str(r.pk) for r in runs.values()}
    assert _ids(client.get("/")) == everything
    assert _ids(client.get("/", {"status": "needs_review"})) == {str(runs["review"].pk)}
    assert _ids(client.get("/", {"agent": "search"})) == {str(runs["pending"].pk)}
    assert _ids(client.get("/", {"has_unknown": "on"})) == {str(runs["review"].pk)}
    assert _ids(client.get("/", {"over_80": "on"})) == {str(runs["busy"].pk)}
    assert _ids(client.get("/", {"q": "ticket-7"})) == {str(runs["review"].pk)}
    assert _ids(client.get("/", {"q": str(runs["busy"].pk)})) == {str(runs["busy"].pk)}
    assert _ids(client.get("/", {"q": "nothing-like-this"})) == set()
    assert _ids(client.get("/", {"date_from": "2000-01-01", "date_to": "2000-01-02"})) == set()


@pytest.mark.django_db
def test_status_counts_count_every_run_and_cap_big_numbers(runs, monkeypatch):
    from review import selectors

    counts = _client().get("/", {"agent": "tight"}).context["counts"]
    assert (counts["needs_review"], counts["pending"], counts["running"]) == (1, 1, 1)
    assert sum(counts.values()) == 3
    run_create(agent="search", input={}, actor="w")
    monkeypatch.setattr(selectors, "STATUS_COUNT_CAP", 1)
    response = _client().get("/")
    assert response.context["counts"]["pending"] == 2  # counted up to CAP + 1
    assert '<span class="badge s-pending">pending</span><strong>1+</strong>' in (
        response.content.decode()
    )


@pytest.mark.django_db
def test_bad_filter_input_is_explained_not_a_500(runs):
    response = _client().get("/", {"date_from": "yesterday", "page": "-3"})
    assert response.status_code == 200
    assert b"Enter a valid date." in response.content


@pytest.mark.django_db
def test_list_polls_while_runs_are_live_and_stops_when_none_are(runs, settings):
    settings.DASHBOARD_POLL_SECONDS = 5  # the default (the suite polls faster)
    client = _client()
    page = client.get("/").content.decode()
    assert 'hx-trigger="every 5s"' in page
    assert "refreshing every 5 s." in page
    settings.DASHBOARD_POLL_SECONDS = 0.5
    assert 'hx-trigger="every 500ms"' in client.get("/").content.decode()
    live = client.get("/", HTTP_HX_REQUEST="true")
    assert live.status_code == 200
    done = client.get("/", {"status": "completed"}, HTTP_HX_REQUEST="true")
    assert done.status_code == 286  # htmx: stop polling
    assert b"<html" not in done.content


@pytest.mark.django_db
def test_transcript_live_partial_stops_polling_once_the_run_is_final(groups):
    item = killed_support_run()
    client = _client(SUPERVISORS)
    assert client.get(f"/runs/{item.run_id}/?part=live", HTTP_HX_REQUEST="true").status_code == 200
    client.post(f"/queue/{item.run_id}/2/resolve", {"action": "abandon", "note": "cancelled"})
    stopped = client.get(f"/runs/{item.run_id}/?part=live", HTTP_HX_REQUEST="true")
    assert stopped.status_code == 286
    assert b"abandoned" in stopped.content


@pytest.mark.django_db
def test_transcript_shows_history_keys_and_verifies_the_chain(groups):
    item = killed_support_run()
    client = _client()
    page = client.get(f"/runs/{item.run_id}/").content.decode()
    assert "lease lost at step 3, worker w-7" in page
    assert "sent to review (unknown_step)" in page
    assert item.step.idempotency_key in page
    verify = client.get(f"/runs/{item.run_id}/verify", HTTP_HX_REQUEST="true").content.decode()
    assert f"The chain holds: {item.run.event_seq} events verified." in verify


@pytest.mark.django_db
def test_unknown_run_is_a_404_page(groups):
    response = _client().get("/runs/00000000-0000-0000-0000-000000000000/")
    assert response.status_code == 404
    assert b"No such run." in response.content


@pytest.mark.django_db
def test_open_review_item_poll_swaps_only_when_the_item_changed(groups):
    """A supervisor typing a note must not lose it to the poll: unchanged → 204 (no swap)."""
    item = killed_support_run()
    client = _client(SUPERVISORS)
    url = f"/queue/{item.run_id}/2/"
    seen = client.get(url).context["seen"]
    assert client.get(url, {"seen": seen}, HTTP_HX_REQUEST="true").status_code == 204
    other = Client()
    other.force_login(user_in(SUPERVISORS, "alice"))
    other.post(f"{url}resolve", {"action": "sent", "note": "alice saw it"})
    changed = client.get(url, {"seen": seen}, HTTP_HX_REQUEST="true")
    assert changed.status_code == 286  # resolved: show who did, and stop polling
    assert b"Resolved as <strong>sent</strong> by <strong>alice</strong>" in changed.content


@pytest.mark.django_db
def test_htmx_is_served_from_our_own_static_files_no_cdn(groups):
    from django.contrib.staticfiles import finders

    page = _client().get("/").content.decode()
    assert '<script src="/static/django_htmx/htmx-2.min.js"' in page
    assert "https://" not in page and "http://" not in page.replace("http://www.w3.org", "")
    served = finders.find("django_htmx/htmx-2.min.js")
    assert served is not None
    assert 'version:"2.0.10"' in Path(served).read_text()
