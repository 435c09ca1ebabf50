"""PostgreSQL holds the teams' boundary: a query that forgets every filter still sees only the
teams its transaction names, and a row cannot be filed in another team than its run's."""

from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from rest_framework.test import APIClient

from runs.models import Run, Step
from teams.scope import NONE, every_team, team_scope, using
from tests.runs.journal_client import JournalClient
from tests.teams.conftest import World, team_owned_models, world_of


def teams_seen(table: str) -> set[int]:
    """The team of every row of `table` the transaction sees: `SELECT ... FROM table`, unfiltered,
    through the application's own connection."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT team_id FROM {table}")  # noqa: S608 (a table name of ours)
        return {row[0] for row in cursor.fetchall()}


def test_every_team_owned_table_is_row_secured_forced_and_files_new_rows(db: Any) -> None:
    tables = [m._meta.db_table for m in team_owned_models()]
    assert len(tables) >= 20
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relname = ANY(%s) AND c.relrowsecurity"
            " AND c.relforcerowsecurity AND EXISTS (SELECT 1 FROM pg_policy p"
            " WHERE p.polrelid = c.oid AND p.polname = 'team_boundary')"
            " AND EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid"
            " AND t.tgname = 'teams_team_fill')",
            [tables],
        )
        bound = {row[0] for row in cursor.fetchall()}
    assert sorted(set(tables) - bound) == []


def test_an_unfiltered_query_sees_only_the_named_teams_rows(
    two_teams: tuple[World, World], bound_by_rls: None
) -> None:
    billing, returns = two_teams
    for model in team_owned_models():
        table = model._meta.db_table
        with every_team("tests"):
            assert teams_seen(table) >= {billing.team.pk, returns.team.pk}, table
        with team_scope(billing.team.pk):
            assert teams_seen(table) == {billing.team.pk}, table
        with team_scope(returns.team.pk):
            assert teams_seen(table) == {returns.team.pk}, table
        with using(NONE):
            assert teams_seen(table) == set(), table


def test_a_person_in_two_teams_sees_both_and_no_third(
    two_teams: tuple[World, World], bound_by_rls: None
) -> None:
    billing, returns = two_teams
    with team_scope([billing.team.pk, returns.team.pk]):
        assert teams_seen("runs_run") == {billing.team.pk, returns.team.pk}
    with team_scope([billing.team.pk, returns.team.pk + 1000]):
        assert teams_seen("runs_run") == {billing.team.pk}


def test_a_step_filed_in_another_team_than_its_runs_is_refused_by_the_database(
    two_teams: tuple[World, World],
) -> None:
    billing, returns = two_teams
    step = Step.objects.get(run=billing.run, index=0)
    with (
        every_team("tests"),
        pytest.raises(IntegrityError),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            "INSERT INTO runs_step (run_id, journal_month, team_id, index, kind, name, effect,"
            " enforced_by, arguments, arguments_hash, idempotency_key, state, usage_input_tokens,"
            " usage_output_tokens, usage_cost_usd, epoch, intent_at, executions)"
            " SELECT run_id, journal_month, %s, 7, kind, name, effect, enforced_by, arguments,"
            " arguments_hash, idempotency_key || '-7', 'intent', 0, 0, 0, epoch, intent_at, 1"
            " FROM runs_step WHERE id = %s AND run_id = %s",
            [returns.team.pk, step.pk, billing.run.pk],
        )
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


def test_an_approval_filed_in_another_team_than_its_runs_is_refused(
    two_teams: tuple[World, World],
) -> None:
    from runs.models import Approval, ApprovalRequest

    billing, returns = two_teams
    request = ApprovalRequest.objects.get(run=billing.run)
    with every_team("tests"), pytest.raises(IntegrityError), transaction.atomic():
        Approval.objects.create(
            run_id=billing.run.pk,
            request=request,
            by="grace",
            at=request.requested_at,
            team_id=returns.team.pk,
        )


def test_a_row_of_no_named_team_is_refused(two_teams: tuple[World, World]) -> None:
    from runs.models import ApprovalRule

    with every_team("tests"), pytest.raises(IntegrityError), transaction.atomic():
        ApprovalRule.objects.create(tool_pattern="email.*")  # every team: which one?


def test_the_hot_path_works_under_rls_and_another_teams_token_finds_nothing(
    two_teams: tuple[World, World], bound_by_rls: None
) -> None:
    billing, returns = two_teams

    def client(token: str) -> JournalClient:
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        api.default_format = "json"
        return JournalClient(api)

    ours, theirs = client(billing.token), client(returns.token)
    run_id = ours.create(agent="billing-agent")["id"]
    epoch = ours.lease(run_id).json()["epoch"]
    assert ours.intent(run_id, epoch, 0).status_code == 201
    assert ours.outcome(run_id, epoch, 0).status_code == 200
    assert (
        ours.api.post(f"/api/v1/runs/{run_id}/complete", {"epoch": epoch, "output": {}}).status_code
        == 200
    )

    for answer in (
        theirs.api.get(f"/api/v1/runs/{run_id}/"),
        theirs.lease(run_id),
        theirs.intent(run_id, epoch, 1),
        theirs.api.post(f"/api/v1/runs/{run_id}/complete", {"epoch": epoch, "output": {}}),
    ):
        assert answer.status_code == 404, answer.content


def test_the_same_external_id_in_two_teams_is_two_runs(
    two_teams: tuple[World, World], bound_by_rls: None
) -> None:
    billing, returns = two_teams  # each made a run of external id "order-1"
    assert billing.run.external_id == returns.run.external_id == "order-1"
    assert billing.run.pk != returns.run.pk
    assert (billing.run.team_id, returns.run.team_id) == (billing.team.pk, returns.team.pk)


def test_a_server_side_cursor_and_executemany_see_the_scope_too(
    two_teams: tuple[World, World], bound_by_rls: None
) -> None:
    """Statements that cannot carry a second one in their query string (a server-side cursor's
    DECLARE, executemany) get the scope in a statement of their own, inside the transaction."""
    billing, returns = two_teams
    with team_scope(billing.team.pk):
        assert {r.team_id for r in Run.objects.iterator(chunk_size=1)} == {billing.team.pk}
        with connection.cursor() as cursor:
            cursor.executemany(
                "UPDATE runs_run SET status_reason = %s WHERE agent = %s",
                [("touched", billing.run.agent), ("touched", returns.run.agent)],
            )
    with every_team("tests"):
        touched = dict(Run.objects.filter(status_reason="touched").values_list("agent", "team"))
    assert touched == {billing.run.agent: billing.team.pk}


def test_in_autocommit_each_statement_names_the_scope(bound_by_rls_committed: None) -> None:
    """Without a transaction every statement is its own: each carries the scope, a server-side
    cursor's (WITH HOLD, run at its commit) included."""
    billing, returns = world_of("billing"), world_of("returns")
    assert not connection.in_atomic_block
    with team_scope(returns.team.pk):
        assert teams_seen("runs_run") == {returns.team.pk}
        assert {r.team_id for r in Run.objects.iterator(chunk_size=1)} == {returns.team.pk}
    with using(NONE):
        assert {r.team_id for r in Run.objects.iterator(chunk_size=1)} == set()
        assert teams_seen("runs_run") == set()
    with team_scope(returns.team.pk), connection.cursor() as cursor:
        cursor.executemany(  # its own transaction, which names the scope
            "UPDATE runs_run SET status_reason = %s WHERE agent = %s",
            [("touched", billing.run.agent), ("touched", returns.run.agent)],
        )
    with every_team("tests"):
        assert teams_seen("runs_run") >= {billing.team.pk, returns.team.pk}
        touched = dict(Run.objects.filter(status_reason="touched").values_list("agent", "team"))
    assert touched == {returns.run.agent: returns.team.pk}
