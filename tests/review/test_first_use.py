"""What a first use of the desk found, one story each; every test failed before its fix."""

import io
import logging
from typing import Any

import pytest
from django.test import Client

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, AUDITORS, SUPERVISORS
from runs.constants import RunStatus
from runs.kernel import BudgetStopped
from runs.models import BudgetPolicy, Run, WorkerToken
from runs.services.creation import run_create
from runs.services.finish import run_complete
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record
from runs.tokens import worker_token_create
from tests.review.factories import PASSWORD, killed_support_run, user_in

pytestmark = pytest.mark.django_db


def _client(group: str | None, username: str | None = None) -> Client:
    client = Client()
    client.force_login(user_in(group, username))
    return client


def _found(client: Client, q: str) -> set[str]:
    return {str(row["run"].pk) for row in client.get("/", {"q": q}).context["rows"]}


def test_search_finds_the_ticket_the_short_id_and_the_customer_address(groups: Any) -> None:
    grace = killed_support_run(external_id="ticket:T-1004", customer="grace@example.com").run
    other = killed_support_run(external_id="ticket:T-2001", customer="linus@example.com").run
    client = _client(AUDITORS)
    assert _found(client, "T-1004") == {str(grace.pk)}  # part of the external id
    assert _found(client, "t-1004") == {str(grace.pk)}  # any case
    assert _found(client, str(grace.pk)[:8]) == {str(grace.pk)}  # the short id the list shows
    assert _found(client, "grace@exam") == {str(grace.pk)}  # part of the customer's address
    assert _found(client, "example.com") == {str(grace.pk), str(other.pk)}
    assert _found(client, "nobody-like-this") == set()


def test_a_healthy_run_that_completed_at_its_step_limit_is_not_painted_red(groups: Any) -> None:
    BudgetPolicy.objects.create(
        name="two",
        agent="two-steps",
        max_steps=2,
        max_tokens=1000,
        max_wall_seconds=3600,
        max_recoveries=1,
    )
    run, _ = run_create(agent="two-steps", input={}, actor="w")
    epoch = run_lease_acquire(run_id=run.pk, worker="w", ttl_seconds=30, actor="w").epoch
    for index in range(2):
        step_intent_record(
            run_id=run.pk,
            epoch=epoch,
            index=index,
            kind="model",
            name="model.chat",
            effect="read",
            arguments={"i": index},
            outcome={"status": "ok", "result": {}},
            actor="w",
        )
    run_complete(run_id=run.pk, epoch=epoch, output={}, actor="w")
    for page in ("/", f"/runs/{run.pk}/"):
        html = _client(AUDITORS).get(page).content.decode()
        assert 'title="steps: 2 of 2"' in html
        assert "bar-over" not in html and "bar-warn" not in html, page
        assert "bar-done" in html


def test_raising_one_limit_says_what_still_blocks_the_run_and_updates_its_reason(
    groups: Any,
) -> None:
    BudgetPolicy.objects.create(
        name="tiny",
        agent="tiny",
        max_steps=1,
        max_tokens=10,
        max_wall_seconds=3600,
        max_recoveries=1,
    )
    run, _ = run_create(agent="tiny", input={}, actor="w")
    epoch = run_lease_acquire(run_id=run.pk, worker="w", ttl_seconds=30, actor="w").epoch
    with pytest.raises(BudgetStopped):  # recorded, and the run stops
        step_intent_record(
            run_id=run.pk,
            epoch=epoch,
            index=0,
            kind="model",
            name="model.chat",
            effect="read",
            arguments={},
            outcome={"status": "ok", "result": {}, "usage": {"input_tokens": 50}},
            actor="w",
        )
    run.refresh_from_db()
    assert (run.status, run.status_reason) == (RunStatus.BUDGET_EXCEEDED, "tokens")
    response = _client(ADMINS).post(
        f"/runs/{run.pk}/limits", {"steps": "5", "note": "longer ticket"}, follow=True
    )
    text = response.content.decode()
    assert "still stopped: its tokens budget is spent (50 of 10)" in text
    run.refresh_from_db()
    assert (run.status, run.status_reason) == (RunStatus.BUDGET_EXCEEDED, "tokens")
    response = _client(ADMINS).post(
        f"/runs/{run.pk}/limits", {"tokens": "1000", "note": "more"}, follow=True
    )
    assert "the run resumes with the next lease" in response.content.decode()
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


def test_a_step_limit_still_spent_after_raising_tokens_is_named(groups: Any) -> None:
    BudgetPolicy.objects.create(
        name="one",
        agent="one",
        max_steps=1,
        max_tokens=10,
        max_wall_seconds=3600,
        max_recoveries=1,
    )
    run, _ = run_create(agent="one", input={}, actor="w")
    epoch = run_lease_acquire(run_id=run.pk, worker="w", ttl_seconds=30, actor="w").epoch
    with pytest.raises(BudgetStopped):  # recorded, and the run stops
        step_intent_record(
            run_id=run.pk,
            epoch=epoch,
            index=0,
            kind="model",
            name="model.chat",
            effect="read",
            arguments={},
            outcome={"status": "ok", "result": {}, "usage": {"input_tokens": 50}},
            actor="w",
        )
    _client(ADMINS).post(f"/runs/{run.pk}/limits", {"tokens": "1000", "note": "more"})
    run.refresh_from_db()
    # tokens have room now; the step budget (1 of 1) still stops the next step
    assert (run.status, run.status_reason) == (RunStatus.BUDGET_EXCEEDED, "steps")


def test_revoking_a_token_asks_first(groups: Any) -> None:
    token, _ = worker_token_create(name="pod-1")
    admin = _client(ADMINS)
    tokens_page = admin.get("/tokens/").content.decode()
    assert f"/tokens/{token.pk}/revoke" in tokens_page
    question = admin.get(f"/tokens/{token.pk}/revoke").content.decode()
    assert "Revoke “pod-1”" in question and 'id="revoke-yes"' in question
    admin.post(f"/tokens/{token.pk}/revoke")  # a POST without the answer only asks again
    assert WorkerToken.objects.get(pk=token.pk).revoked_at is None
    admin.post(f"/tokens/{token.pk}/revoke", {"confirm": "yes"})
    assert WorkerToken.objects.get(pk=token.pk).revoked_at is not None


def test_a_refused_page_is_one_log_line_and_an_audit_entry(groups: Any) -> None:
    handler = next(
        h
        for h in logging.getLogger().handlers
        if any(type(f).__name__ == "ForbiddenWithoutTraceback" for f in h.filters)
    )
    stream = io.StringIO()
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.setStream(stream)
    try:
        response = _client(AUDITORS, "ann").get("/tokens/")
        # the audit app's own PermissionDenied (raised, not returned) goes through the filter too
        _client(SUPERVISORS, "sue").get("/audit/exports/")
    finally:
        handler.setStream(previous)  # type: ignore[arg-type]
    assert response.status_code == 403
    logged = [line for line in stream.getvalue().splitlines() if line.strip()]
    assert logged and all(line.startswith("Forbidden") for line in logged), logged
    assert "Traceback" not in stream.getvalue()
    entry = AuditEntry.objects.get(action="access.refused")
    assert (entry.actor_name, entry.target) == ("ann", "/tokens/")


def test_logins_failures_and_lockouts_are_in_the_audit_log(groups: Any, settings: Any) -> None:
    settings.LOGIN_MAX_FAILURES = 2
    user_in(SUPERVISORS, "carol")
    client = Client()
    client.post("/login/", {"username": "carol", "password": PASSWORD})
    client.post("/logout/")
    for _ in range(2):
        client.post("/login/", {"username": "carol", "password": "wrong"})
    client.post("/login/", {"username": "carol", "password": PASSWORD})
    actions = list(
        AuditEntry.objects.filter(target="user:carol")
        .order_by("at")
        .values_list("action", flat=True)
    )
    assert actions == [
        "login",
        "login.failed",
        "login.failed",
        "login.lockout",
        "login.refused_locked",
    ]


def test_the_django_admin_login_is_the_dashboards_locked_out_login(
    groups: Any, settings: Any
) -> None:
    settings.LOGIN_MAX_FAILURES = 2
    admin = user_in(ADMINS, "root")
    admin.is_staff = True
    admin.save()
    client = Client()
    for _ in range(3):
        response = client.post("/django-admin/login/", {"username": "root", "password": "wrong"})
        assert response.status_code == 302
        assert response["Location"].startswith("/login/?next=")
    # the admin form never checked a password: no way around the lockout
    for _ in range(2):
        client.post("/login/", {"username": "root", "password": "wrong"})
    assert client.post("/login/", {"username": "root", "password": PASSWORD}).status_code == 429
    assert client.get("/django-admin/login/?next=/django-admin/runs/").status_code == 302


def test_a_favicon_is_served(groups: Any) -> None:
    page = _client(AUDITORS).get("/").content.decode()
    assert 'rel="icon"' in page
    response = Client().get("/favicon.ico")
    assert response.status_code == 302 and response["Location"].endswith(".svg")


def test_the_runs_list_still_finds_a_whole_id(groups: Any) -> None:
    run = Run.objects.get(pk=killed_support_run().run_id)
    assert _found(_client(AUDITORS), str(run.pk)) == {str(run.pk)}
