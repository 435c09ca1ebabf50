"""Two teams, each with a row in every team-owned table, and a connection bound by row-level
security whatever role the suite connects as."""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from audit.models import ExportJob, Incident, IncidentRun
from console.models import RunDay
from dashboard.audit import audit_record
from review.models import Escalation, EscalationWebhook, WebhookDelivery
from runs.models import Approval, ApprovalRequest, ApprovalRule, ForkFence, Run
from runs.services.creation import run_create
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record
from runs.tokens import worker_token_create
from teams.models import Membership, Team
from teams.scope import team_scope
from teams.services import grant_role, team_create
from tests.review.browser import review_server  # noqa: F401  (fixture)
from tools.models import IdempotencyKey, McpTool, OutboundEmail, Ticket, TicketComment


def team_owned_models() -> list[Any]:
    """Every model with a team column (a foreign key named `team` to teams.Team): the tables the
    boundary must cover, found from the models so a new one is covered without a word here."""
    return sorted(
        (
            model
            for model in apps.get_models()
            if any(
                f.name == "team" and f.is_relation and f.related_model is Team
                for f in model._meta.concrete_fields
            )
        ),
        key=lambda m: m._meta.db_table,
    )


@dataclass
class World:
    team: Team
    run: Run
    token: str


def world_of(slug: str) -> World:
    """A team with a row in every team-owned table, each made the way the application makes it
    (a service, or the model under the team's scope: the database files it in the team)."""
    team = team_create(slug=slug, name=slug.title(), actor="tests")
    now = timezone.now()
    with team_scope(team.pk):
        _, raw = worker_token_create(name=f"{slug}-worker")
        ApprovalRule.objects.create(tool_pattern="refund.*", created_by="tests")
        run, _ = run_create(agent=f"{slug}-agent", input={}, external_id="order-1", actor="t")
        grant = run_lease_acquire(run_id=run.pk, worker="w", ttl_seconds=60, actor="t")
        step_intent_record(
            run_id=run.pk,
            epoch=grant.epoch,
            index=0,
            kind="tool",
            name="refund.issue",
            effect="write",
            enforced_by="ledger",
            arguments={"amount": 5},
            actor="t",
        )
        request = ApprovalRequest.objects.get(run=run)
        Approval.objects.create(run_id=run.pk, request=request, by="ada", at=now)
        ForkFence.objects.create(run=run, tool="email.send", created_by="tests")
        IdempotencyKey.objects.create(
            key=f"{run.pk}:0:refund.issue:{slug}",
            tool="refund.issue",
            request_hash="0" * 64,
            state="in_progress",
            locked_at=now,
            created_at=now,
        )
        ticket = Ticket.objects.create(customer=f"c@{slug}.example", subject="s", body="b")
        TicketComment.objects.create(ticket=ticket, body="b", idempotency_key=f"{slug}-c")
        OutboundEmail.objects.create(
            to=f"c@{slug}.example",
            subject="s",
            body="b",
            message_id=f"<{slug}@x>",
            idempotency_key=f"{slug}-e",
        )
        McpTool.objects.create(server="files", name="read", first_seen=now, last_seen=now)
        audit_record(actor="tests", action="test.touch", target=f"run:{run.pk}")
        Escalation.objects.create(run=run, sent_at=now)
        hook = EscalationWebhook.objects.create(url=f"https://{slug}.example/h", secret="s")
        WebhookDelivery.objects.create(webhook=hook, body="{}", created_at=now)
        ExportJob.objects.create(created_by_name="tests", format="jsonl")
        incident = Incident.objects.create(
            title="t",
            severity="serious",
            aware_at=now,
            report_due_at=now + timedelta(days=15),
            opened_by="tests",
            opened_at=now,
            updated_at=now,
        )
        IncidentRun.objects.create(incident=incident, run_id=run.pk)
        RunDay.objects.create(
            day=now.date(),
            agent=run.agent,
            status=run.status,
            runs=1,
            tokens=0,
            recoveries=0,
            refreshed_at=now,
        )
    person = User.objects.create_user(username=f"{slug}-supervisor")
    grant_role(person, team, "supervisor", actor="tests")
    assert Membership.objects.filter(team=team).exists()
    return World(team=team, run=run, token=raw)


@pytest.fixture
def two_teams(db: Any) -> tuple[World, World]:
    return world_of("billing"), world_of("returns")


@pytest.fixture
def bound_by_rls(db: Any) -> Iterator[None]:
    """The application's connection, bound by row-level security: as it is when the suite
    connects as an ordinary role (the tables' owner: FORCE binds it); when it connects as a
    superuser (which row-level security never binds), it takes an ordinary role for the test
    (SET ROLE, undone with the test's transaction)."""
    yield from _bound()


@pytest.fixture
def bound_by_rls_committed(transactional_db: Any) -> Iterator[None]:
    """As `bound_by_rls`, for a test whose statements commit (autocommit): the ordinary role a
    superuser takes is dropped at the end."""
    yield from _bound()


def _bound() -> Iterator[None]:
    in_transaction = connection.in_atomic_block
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user")
        exempt = cursor.fetchone()[0]
        if exempt:
            probe = f"rls_probe_{connection.settings_dict['NAME']}"[:60]
            cursor.execute(f'CREATE ROLE "{probe}" NOLOGIN NOSUPERUSER NOBYPASSRLS')
            cursor.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{probe}"')
            cursor.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "{probe}"')
            cursor.execute(f'SET ROLE "{probe}"')
    try:
        yield
    finally:
        if exempt:
            with connection.cursor() as cursor:
                cursor.execute("RESET ROLE")
                if not in_transaction:
                    cursor.execute(f'DROP OWNED BY "{probe}"')
                    cursor.execute(f'DROP ROLE "{probe}"')
