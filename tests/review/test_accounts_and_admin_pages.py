"""Login (with lockout), session expiry, password change; policies, tokens, audit log, escalation."""

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.contrib.sessions.models import Session
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone

from dashboard.audit import AuditEntry, audit_record
from dashboard.roles import ADMINS, AUDITORS, SUPERVISORS
from review.models import Escalation, LoginFailure
from review.services.escalations import review_items_escalate
from runs import clock
from runs.models import BudgetPolicy, WorkerToken
from runs.tokens import worker_token_create
from tests.review.factories import PASSWORD, UnknownStep, killed_support_run, user_in


def _messages(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.mark.django_db
def test_login_lands_on_runs_and_logout_ends_the_session(groups):
    user_in(SUPERVISORS, "carol")
    client = Client()
    response = client.post("/login/", {"username": "carol", "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200
    client.post("/logout/")
    assert client.get("/").status_code == 302


@pytest.mark.django_db
def test_repeated_failed_logins_lock_that_username_and_address_out(groups, settings):
    settings.LOGIN_MAX_FAILURES = 3
    user_in(SUPERVISORS, "carol")
    client = Client()
    for _ in range(3):
        response = client.post("/login/", {"username": "carol", "password": "wrong"})
        assert response.status_code == 200
    # now even the right password is refused until the window passes
    response = client.post("/login/", {"username": "carol", "password": PASSWORD})
    assert response.status_code == 429
    assert b"Too many failed logins" in response.content
    assert "_auth_user_id" not in client.session
    # another username from the same address is not locked
    user_in(SUPERVISORS, "dave")
    assert client.post("/login/", {"username": "dave", "password": PASSWORD}).status_code == 302
    # the lockout ends
    LoginFailure.objects.filter(username="carol").update(
        locked_until=timezone.now() - timedelta(seconds=1)
    )
    client = Client()
    assert client.post("/login/", {"username": "carol", "password": PASSWORD}).status_code == 302
    assert not LoginFailure.objects.filter(username="carol").exists()


@pytest.mark.django_db
def test_an_expired_session_must_log_in_again(groups):
    user_in(AUDITORS, "erin")
    client = Client()
    client.post("/login/", {"username": "erin", "password": PASSWORD})
    assert client.get("/").status_code == 200
    Session.objects.update(expire_date=timezone.now() - timedelta(seconds=1))
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


@pytest.mark.django_db
def test_password_change_needs_the_old_password(groups):
    user = user_in(AUDITORS, "erin")
    client = Client()
    client.force_login(user)
    response = client.post(
        "/password/",
        {
            "old_password": "nope",
            "new_password1": "Tr1cky-horse-77",
            "new_password2": "Tr1cky-horse-77",
        },
    )
    assert response.status_code == 200
    assert b"Your old password was entered incorrectly" in response.content
    response = client.post(
        "/password/",
        {
            "old_password": PASSWORD,
            "new_password1": "Tr1cky-horse-77",
            "new_password2": "Tr1cky-horse-77",
        },
    )
    assert response.status_code == 302
    user.refresh_from_db()
    assert user.check_password("Tr1cky-horse-77")


# --- budget policies ---------------------------------------------------------------------------


def _policy(**overrides: Any) -> dict[str, str]:
    return {
        "name": "billing",
        "agent": "billing",
        "max_steps": "30",
        "max_tokens": "5000",
        "max_wall_seconds": "600",
        "max_cost_usd": "",
        "max_recoveries": "2",
        **overrides,
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_policy(name=""), "This field is required."),
        (_policy(max_steps="0"), "Must be at least 1."),
        (_policy(max_cost_usd="0"), "Must be more than 0"),
        (_policy(is_default="on"), "The default policy applies to every agent"),
        (_policy(agent=""), "Assign the policy to an agent, or make it the default."),
        (_policy(agent="support"), "Budget policy with this Agent already exists."),
        (_policy(name="support-policy", agent="x"), "Budget policy with this Name already exists."),
    ],
    ids=[
        "no name",
        "zero steps",
        "zero cost",
        "default with agent",
        "no agent",
        "agent taken",
        "name taken",
    ],
)
def test_policy_validation_explains_and_saves_nothing(client_for, data, message):
    BudgetPolicy.objects.create(
        name="support-policy",
        agent="support",
        max_steps=5,
        max_tokens=5,
        max_wall_seconds=5,
        max_recoveries=1,
    )
    before = BudgetPolicy.objects.count()
    response = client_for(ADMINS).post("/policies/new", data)
    assert response.status_code == 400  # the form again, with its errors (as every settings form)
    assert message in response.content.decode()
    assert BudgetPolicy.objects.count() == before
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_making_a_policy_the_default_moves_the_default_flag(client_for):
    BudgetPolicy.objects.filter(is_default=True).delete()
    old = BudgetPolicy.objects.create(
        name="old-default",
        is_default=True,
        max_steps=5,
        max_tokens=5,
        max_wall_seconds=5,
        max_recoveries=1,
    )
    response = client_for(ADMINS).post(
        "/policies/new",
        _policy(name="new-default", agent="", is_default="on", replace_default="on"),
    )
    assert response.status_code == 302
    old.refresh_from_db()
    assert not old.is_default
    assert BudgetPolicy.objects.get(is_default=True).name == "new-default"
    entry = AuditEntry.objects.get(action="policy.create")
    assert entry.details["after"]["max_steps"] == 30


@pytest.mark.django_db
def test_editing_a_policy_records_before_and_after(client_for):
    policy = BudgetPolicy.objects.create(
        name="support-policy",
        agent="support",
        max_steps=5,
        max_tokens=5,
        max_wall_seconds=5,
        max_recoveries=1,
    )
    client_for(ADMINS).post(
        f"/policies/{policy.pk}/",
        _policy(name="support-policy", agent="support", max_steps="40", note="bigger tickets"),
    )
    policy.refresh_from_db()
    assert policy.max_steps == 40
    entry = AuditEntry.objects.get(action="policy.update")
    assert (entry.details["before"]["max_steps"], entry.details["after"]["max_steps"]) == (5, 40)
    assert entry.note == "bigger tickets"


# --- worker tokens -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_new_token_is_shown_once_and_then_only_by_name(client_for):
    client = client_for(ADMINS)
    response = client.post("/tokens/", {"name": "pod-7"})
    token = WorkerToken.objects.get(name="pod-7")
    raw = response.context["created"][1]
    assert raw.startswith(token.prefix)
    assert raw in response.content.decode()
    assert response["Cache-Control"] == "no-store"
    listing = client.get("/tokens/").content.decode()
    assert "pod-7" in listing and raw not in listing
    assert AuditEntry.objects.get(action="token.create").details["prefix"] == token.prefix


@pytest.mark.django_db
def test_an_admin_limits_a_token_to_agents_and_it_sees_only_their_runs(client_for):
    client = client_for(ADMINS)
    response = client.post(
        "/tokens/", {"name": "triage-pods", "agents": "triage, billing", "tools_direct": "on"}
    )
    token = WorkerToken.objects.get(name="triage-pods")
    assert (token.agents, token.scope) == (["billing", "triage"], "worker tools:direct")
    entry = AuditEntry.objects.get(action="token.create")
    assert entry.details["agents"] == ["billing", "triage"]
    assert "billing, triage" in client.get("/tokens/").content.decode()

    api = Client(HTTP_AUTHORIZATION=f"Bearer {response.context['created'][1]}")
    other = api.post(
        "/api/v1/runs/", {"agent": "support", "input": {}}, content_type="application/json"
    )
    assert other.status_code == 403 and other.json()["error"]["code"] == "agent_not_allowed"
    mine = api.post(
        "/api/v1/runs/", {"agent": "triage", "input": {}}, content_type="application/json"
    )
    assert mine.status_code == 201


@pytest.mark.django_db
def test_a_token_with_a_malformed_agent_name_is_refused(client_for):
    response = client_for(ADMINS).post("/tokens/", {"name": "x", "agents": "support, no spaces"})
    assert response.status_code == 400
    assert b"Not an agent name" in response.content
    assert not WorkerToken.objects.exists()


@pytest.mark.django_db
def test_a_token_without_a_name_is_refused(client_for):
    response = client_for(ADMINS).post("/tokens/", {"name": "  "})
    assert response.status_code == 400
    assert b"A token needs a name" in response.content
    assert not WorkerToken.objects.exists()


@pytest.mark.django_db
def test_revoked_token_no_longer_opens_the_worker_api(client_for):
    token, raw = worker_token_create(name="pod-1")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get("/api/v1/tools/").status_code == 200
    client_for(ADMINS).post(f"/tokens/{token.pk}/revoke", {"confirm": "yes"})
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert api.get("/api/v1/tools/").status_code == 401
    assert client_for(ADMINS).post("/tokens/999999/revoke", {"confirm": "yes"}).status_code == 302
    assert AuditEntry.objects.filter(action="token.revoke").count() == 1


# --- audit log -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_audit_log_filters_by_who_what_and_target(client_for):
    alice = user_in(SUPERVISORS, "alice")
    audit_record(actor=alice, action="step.resolve.sent", target="step:r1#2", note="seen")
    audit_record(actor="system:retention", action="retention.purge", target="run:r9")
    client = client_for(AUDITORS)
    page = client.get("/audit-log/", {"actor": "alice"}).content.decode()
    assert "step:r1#2" in page and "run:r9" not in page
    page = client.get("/audit-log/", {"action": "retention"}).content.decode()
    assert "run:r9" in page and "step:r1#2" not in page
    page = client.get("/audit-log/", {"target": "r1"}).content.decode()
    assert "step:r1#2" in page and "run:r9" not in page


@pytest.mark.django_db
def test_audit_entries_cannot_be_edited_or_deleted(groups):
    from django.db import DatabaseError, transaction

    entry = audit_record(actor="system", action="x.y", target="t")
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEntry.objects.filter(pk=entry.pk).update(note="rewritten")
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEntry.objects.filter(pk=entry.pk).delete()
    assert AuditEntry.objects.get(pk=entry.pk).note == ""


# --- escalation ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_item_past_the_sla_mails_the_supervisors_once(groups, settings, mailoutbox, monkeypatch):
    settings.REVIEW_SLA_SECONDS = 600
    user_in(SUPERVISORS, "alice", email="alice@example.com")
    user_in(SUPERVISORS, "bob", email="bob@example.com")
    user_in(AUDITORS, "erin", email="erin@example.com")
    item: UnknownStep = killed_support_run()
    assert review_items_escalate() == 0  # not late yet
    later = clock.now() + timedelta(seconds=601)
    monkeypatch.setattr(clock, "now", lambda: later)
    assert review_items_escalate() == 1
    assert review_items_escalate() == 0  # never twice for the same item
    [mail] = mailoutbox
    assert sorted(mail.to) == ["alice@example.com", "bob@example.com"]
    assert f"/queue/{item.run_id}/2/" in mail.body
    assert Escalation.objects.get().step_id == item.step.pk


@pytest.mark.django_db
def test_stale_login_failure_counters_are_pruned_but_live_lockouts_kept(groups):
    from dashboard.services.logins import login_failure_record, login_failures_prune

    login_failure_record(username="ghost", ip="10.0.0.1")
    login_failure_record(username="locked", ip="10.0.0.2")
    old = timezone.now() - timedelta(hours=2)
    LoginFailure.objects.update(first_failure_at=old)
    LoginFailure.objects.filter(username="locked").update(
        locked_until=timezone.now() + timedelta(minutes=5)
    )
    assert login_failures_prune() == 1
    assert list(LoginFailure.objects.values_list("username", flat=True)) == ["locked"]


def test_beat_prunes_login_failures_through_the_dashboard_task(settings):
    from dashboard.tasks import prune_login_failures

    entry = settings.CELERY_BEAT_SCHEDULE["dashboard-prune-login-failures"]
    assert entry["task"] == prune_login_failures.name == "dashboard.tasks.prune_login_failures"


@pytest.mark.django_db
def test_beat_task_escalates_through_the_service(groups, settings, mailoutbox, monkeypatch):
    from review.tasks import escalate_waiting_items

    settings.REVIEW_SLA_SECONDS = 60
    user_in(SUPERVISORS, "alice", email="alice@example.com")
    killed_support_run()
    later = clock.now() + timedelta(seconds=61)
    monkeypatch.setattr(clock, "now", lambda: later)
    assert escalate_waiting_items() == 1  # called directly: a task is a thin caller
    assert len(mailoutbox) == 1


@pytest.mark.django_db
def test_the_database_escalates_a_step_once_and_a_run_waiting_without_a_step_once(groups):
    """The no-repeat rule is the database's: two beats racing each insert; one wins."""
    waiting = killed_support_run()
    now = clock.now()
    Escalation.objects.create(step=waiting.step, run=waiting.run, sent_at=now)
    Escalation.objects.create(run=waiting.run, sent_at=now)  # the run itself: another item
    with pytest.raises(IntegrityError), transaction.atomic():
        Escalation.objects.create(step=waiting.step, run=waiting.run, sent_at=now)
    with pytest.raises(IntegrityError), transaction.atomic():
        Escalation.objects.create(run=waiting.run, sent_at=now)
    other = killed_support_run(external_id="T-2")
    Escalation.objects.create(run=other.run, sent_at=now)  # another run is escalated once too
    assert Escalation.objects.count() == 3
