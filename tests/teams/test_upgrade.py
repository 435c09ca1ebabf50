"""An install upgraded to teams: what it held lands in `default`, its people keep their roles
there, and its worker token keeps working.

A fresh database is migrated to the leaves of commit cb2a413 (the head before teams), given runs,
steps, a review item, a policy, a rule, a token, an audit entry and a supervisor with the models
of that time, then migrated forward to today's head."""

import hashlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from rest_framework.test import APIClient

from teams.models import DEFAULT_TEAM_SLUG, Membership, Team
from tests.teams.conftest import team_owned_models

# each app's newest migration at cb2a413 (teams did not exist yet)
LEAVES_BEFORE_TEAMS = [
    ("runs", "0010_plural_names"),
    ("tools", "0001_initial"),
    ("review", "0003_plural_names"),
    ("audit", "0003_plural_names"),
    ("console", "0001_initial"),
    ("sso", "0002_plural_names"),
    ("traces", "0001_initial"),
]
RAW_TOKEN = "alw_an-install-older-than-teams-0123456789"


@pytest.fixture
def fresh_database(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """The default connection on an empty database of its own for the test, then back."""
    original = connection.settings_dict["NAME"]
    name = f"{original}_upgrade"
    with django_db_blocker.unblock():
        connection.close()
        with connection._nodb_cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            cursor.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        connection.settings_dict["NAME"] = name
        try:
            yield name
        finally:
            connection.close()
            connection.settings_dict["NAME"] = original
            with connection._nodb_cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _before_teams(apps: Any) -> dict[str, Any]:
    """What an install had: written with the models of cb2a413."""
    now = timezone.now()
    policy = apps.get_model("runs", "BudgetPolicy").objects.get(is_default=True)
    run = apps.get_model("runs", "Run").objects.create(
        agent="support",
        external_id="T-1001",
        input={"ticket": "T-1001"},
        policy=policy,
        limit_steps=policy.max_steps,
        limit_tokens=policy.max_tokens,
        limit_wall_seconds=policy.max_wall_seconds,
        limit_recoveries=policy.max_recoveries,
        deadline=now + timedelta(hours=1),
        event_head="0" * 64,
        status="needs_review",
        status_reason="unknown_step",
        step_count=1,
        used_steps=1,
        epoch=1,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ledger_event_append(%s, %s, 1, %s, 'run_created', '{}', '{', 'test', %s)",
            [run.pk, run.journal_month, "0" * 64, now],
        )
        (head,) = cursor.fetchone()
    run.event_seq, run.event_head = 1, head
    run.save(update_fields=["event_seq", "event_head"])
    apps.get_model("runs", "Step").objects.create(
        run=run,
        journal_month=run.journal_month,
        index=0,
        kind="tool",
        name="email.send",
        effect="write",
        enforced_by="nobody",
        arguments={"to": "c@example.com"},
        arguments_hash="0" * 64,
        idempotency_key=f"{run.pk}:0:email.send",
        state="unknown",
        epoch=1,
        intent_at=now,
    )
    apps.get_model("runs", "ApprovalRule").objects.create(tool_pattern="refund.*")
    apps.get_model("runs", "WorkerToken").objects.create(
        name="old-worker",
        prefix=RAW_TOKEN[:10],
        token_hash=hashlib.sha256(RAW_TOKEN.encode()).hexdigest(),
        scope="worker",
        agents=[],
    )
    apps.get_model("review", "AuditEntry").objects.create(
        actor_name="ops", action="policy.update", target=f"policy:{policy.pk}"
    )
    sam = apps.get_model("auth", "User").objects.create(username="sam")
    sam.groups.add(apps.get_model("auth", "Group").objects.get(name="supervisors"))
    return {"run": run.pk}


def test_an_install_from_before_teams_lands_in_default_and_keeps_working(
    fresh_database: str,
) -> None:
    executor = MigrationExecutor(connection)
    graph = executor.loader.graph
    ours = {app for app, _ in LEAVES_BEFORE_TEAMS} | {"teams"}
    targets = LEAVES_BEFORE_TEAMS + [leaf for leaf in graph.leaf_nodes() if leaf[0] not in ours]
    executor.migrate(targets)
    before = _before_teams(executor.loader.project_state(targets).apps)

    call_command("migrate", verbosity=0)  # to today's head

    default = Team.objects.get(slug=DEFAULT_TEAM_SLUG)
    for model in team_owned_models():
        teams = set(model._base_manager.values_list("team_id", flat=True))
        assert teams <= {default.pk}, model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runs_run WHERE team_id = %s", [default.pk])
        assert cursor.fetchone()[0] == 1
    assert Membership.objects.filter(user__username="sam", team=default, role="supervisor").exists()

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {RAW_TOKEN}")
    old = api.get(f"/api/v1/runs/{before['run']}/")
    assert old.status_code == 200 and old.json()["status"] == "needs_review"
    new = api.post("/api/v1/runs/", {"agent": "support", "input": {}}, format="json")
    assert new.status_code == 201
    from runs.models import Run

    assert Run.objects.get(pk=new.json()["id"]).team_id == default.pk
