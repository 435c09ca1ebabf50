"""The review desk's reads of waiting steps go through their index: they run on every dashboard page (the nav
badge) and on the queue, and at a million steps a scan of runs_step costs most of a second.

Each test asks PostgreSQL for the plan of the exact query the page runs, with sequential scans
priced out (a small test table would otherwise rightly be scanned), and checks which index it
names. Steps are partitioned by month, so the plan names the index's copy on each partition:
an index counts as used when the plan names it or one of its partitions' copies.
"""

from typing import Any

import pytest
from django.db import connection
from django.db.models import QuerySet

from review import selectors
from runs.models import Step

pytestmark = pytest.mark.django_db


def _plan(queryset: QuerySet[Any], *, count: bool = False) -> str:
    sql, params = queryset.query.sql_with_params()
    if count:
        sql = f"SELECT count(*) FROM ({sql}) AS counted"  # noqa: S608 (Django-compiled SQL)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def _index_and_partition_copies(name: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH RECURSIVE copies(oid) AS (
                SELECT %s::regclass::oid
                UNION SELECT i.inhrelid FROM pg_inherits i JOIN copies c ON i.inhparent = c.oid
            )
            SELECT relname FROM pg_class WHERE oid IN (SELECT oid FROM copies)
            """,
            [name],
        )
        return {row[0] for row in cursor.fetchall()}


def _uses(plan: str, index: str) -> bool:
    return any(f" {name} " in f" {plan} " for name in _index_and_partition_copies(index))


def test_the_queue_reads_the_oldest_waiting_steps_along_one_index() -> None:
    queue = Step.objects.filter(state__in=selectors.DESK_STATES).order_by("intent_at", "pk")[:50]
    assert _uses(_plan(queue), "step_desk_idx")


def test_the_nav_badge_counts_waiting_steps_along_one_index() -> None:
    # .count() drops the default ordering, as here
    waiting = Step.objects.filter(state__in=selectors.DESK_STATES).order_by().values("pk")
    plan = _plan(waiting, count=True)
    assert _uses(plan, "step_desk_idx")


def test_similar_past_decisions_read_the_tool_s_latest_decisions_along_an_index(
    unknown_step: Any,
) -> None:
    from review.evidence import similar_decisions

    step = unknown_step.step
    decided = (
        Step.objects.filter(name=step.name, resolution_action__isnull=False)
        .exclude(pk=step.pk)
        .order_by("-resolution_at")[:5]
    )
    assert similar_decisions(step) == list(decided)  # the query this plan is of
    assert _uses(_plan(decided), "step_decided_by_tool_idx")
