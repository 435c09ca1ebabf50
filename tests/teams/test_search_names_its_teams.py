"""A runs search by part of an id reads the scope's teams through an index, not every team's rows.

Under a policy, PostgreSQL checks the policy's condition before any condition that is not
leakproof, and ILIKE is not: a search's ILIKE cannot use its trigram index, and the policy's
condition (a function of a setting) cannot use one either, so a supervisor of one team of ten
scanned all ten teams' runs (bench/TEAMS.md). The runs list names its scope's teams in the query
as the policy does, so the team's index narrows the scan. Each plan is asked with sequential
scans priced out (a small test table would otherwise rightly be scanned), as
tests/review/test_desk_indexes.py does.
"""

from typing import Any

import pytest
from django.db import connection

from review.selectors import RunFilters, runs_filtered
from runs.services.creation import run_create
from teams.scope import every_team, team_scope
from teams.services import team_create

pytestmark = pytest.mark.django_db


def _plan(filters: RunFilters) -> str:
    sql, params = runs_filtered(filters)[:26].query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def _team_index() -> str:
    """runs_run's index on team_id alone (Django names it from the foreign key)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'runs_run'"
            " AND indexdef LIKE '%%(team_id)'"
        )
        return str(cursor.fetchone()[0])  # type: ignore[index]


def test_a_supervisor_of_one_team_searches_that_team_s_runs_by_its_index(db: Any) -> None:
    billing = team_create(slug="billing", name="Billing", actor="tests")
    returns = team_create(slug="returns", name="Returns", actor="tests")
    with team_scope(billing.pk):
        mine, _ = run_create(agent="support", input={}, external_id="T-4711-b", actor="tests")
    with team_scope(returns.pk):
        run_create(agent="support", input={}, external_id="T-4711-r", actor="tests")

    with team_scope(billing.pk):
        assert [r.pk for r in runs_filtered(RunFilters(q="4711"))] == [mine.pk]
        plan = _plan(RunFilters(q="4711"))
    assert f" {_team_index()} " in f" {plan} ", plan
    assert f"Index Cond: (team_id = {billing.pk})" in plan, plan


def test_a_scope_of_every_team_adds_no_team_condition(db: Any) -> None:
    with every_team("operator command"):
        plan = _plan(RunFilters(q="4711"))
    assert "Index Cond: (team_id" not in plan, plan


def test_the_runs_header_counts_only_the_scope_s_teams_by_their_index(db: Any) -> None:
    from django.test.utils import CaptureQueriesContext

    from review.selectors import run_status_counts

    billing = team_create(slug="billing", name="Billing", actor="tests")
    with team_scope(billing.pk):
        run_create(agent="support", input={}, actor="tests")
        with CaptureQueriesContext(connection) as queries:
            counts = run_status_counts()
        counting = next(q["sql"] for q in queries.captured_queries if "UNION ALL" in q["sql"])
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {counting}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
    assert counts["pending"] == 1
    assert f"(team_id = {billing.pk})" in plan, plan
