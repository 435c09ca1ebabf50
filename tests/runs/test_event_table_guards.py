"""The event table's own guards: only its owner purges, and an insert must continue the chain.

A role with plain INSERT/DELETE/SELECT rights on runs_event (what a leaked application-side
credential or a reporting role might have) can neither use the purge switch nor append an event
that does not follow the run's last one.
"""

from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import pytest
from django.db import DatabaseError, connection, transaction
from rest_framework.test import APIClient

from runs.canonical import GENESIS_HASH
from runs.models import Event, Run
from tests.database import APP_ROLE, admin_connect
from tests.runs.journal_client import JournalClient


@pytest.fixture
def journalled_run(api: APIClient) -> str:
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    epoch = journal.lease(run_id).json()["epoch"]
    journal.write_step(run_id, epoch, 0, tokens=5)
    return run_id


@pytest.fixture(scope="module")
def intruder_role() -> Iterator[str]:
    """A role of its own, made by the admin (the suite's role may not make roles) and granted to
    the suite's role so that its connection may SET ROLE to it; dropped after the module's last
    test, whose transaction has taken back what the tests granted it."""
    name = f"ledger_intruder_{uuid4().hex[:10]}"
    with admin_connect() as admin:
        admin.execute(f"CREATE ROLE {name}")
        admin.execute(f'GRANT {name} TO "{APP_ROLE}"')
    try:
        yield name
    finally:
        with admin_connect() as admin:
            admin.execute(f"DROP ROLE {name}")


@pytest.fixture
def intruder(intruder_role: str, db: None) -> str:
    """A role that is not the table's owner, with plain table rights (the owner grants them, in
    the test's transaction)."""
    with connection.cursor() as cursor:
        cursor.execute(f"GRANT SELECT, INSERT, DELETE ON runs_event TO {intruder_role}")
        cursor.execute(f"GRANT SELECT ON runs_run TO {intruder_role}")
        cursor.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {intruder_role}")
    return intruder_role


def _as(role: str, sql: str, params: list[Any]) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL ROLE {role}")
        cursor.execute(sql, params)


def test_a_role_that_does_not_own_the_table_cannot_purge_even_with_the_switch_on(
    journalled_run: str, intruder: str
) -> None:
    before = Event.objects.filter(run_id=journalled_run).count()
    with pytest.raises(DatabaseError, match="append-only"):
        _as(
            intruder,
            "SELECT set_config('agentledger.purge', 'on', true); "
            "DELETE FROM runs_event WHERE run_id = %s",
            [journalled_run],
        )
    assert Event.objects.filter(run_id=journalled_run).count() == before

    # the owner (the role the retention job runs as) still can, under the switch
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL agentledger.purge = 'on'")
        cursor.execute("DELETE FROM runs_event WHERE run_id = %s", [journalled_run])
        assert cursor.rowcount == before
        transaction.set_rollback(True)


# the row carries its run's journal_month (the partition key), as every writer's does
INSERT = (
    "WITH v (run_id, seq, prev, hash) AS (VALUES (%s::uuid, %s::integer, %s, %s)) "
    "INSERT INTO runs_event (run_id, journal_month, seq, type, payload, actor, at, prev_hash, "
    "hash) SELECT v.run_id, r.journal_month, v.seq, 'step_done', '{}', 'worker:mallory', now(), "
    "v.prev, v.hash FROM v JOIN runs_run r ON r.id = v.run_id"
)


@pytest.mark.parametrize("forgery", ["wrong prev_hash", "gap in seq", "a second genesis"])
def test_an_event_that_does_not_continue_the_chain_is_refused_on_insert(
    journalled_run: str, intruder: str, forgery: str
) -> None:
    run = Run.objects.get(pk=journalled_run)
    last = run.event_seq
    seq, prev = {
        "wrong prev_hash": (last + 1, "f" * 64),
        "gap in seq": (last + 2, run.event_head),
        "a second genesis": (last + 1, GENESIS_HASH),
    }[forgery]
    for role in (intruder, "NONE"):  # NONE: the session user, the table's owner
        with pytest.raises(DatabaseError, match="runs_event"):
            _as(role, INSERT, [journalled_run, seq, prev, "a" * 64])
    assert Event.objects.filter(run_id=journalled_run).count() == last


def test_the_first_event_of_a_run_must_start_from_genesis(db: None) -> None:
    from runs import clock

    run = Run.objects.create(
        agent="a",
        limit_steps=1,
        limit_tokens=1,
        limit_wall_seconds=1,
        limit_recoveries=1,
        deadline=clock.now(),
        event_head=GENESIS_HASH,
    )
    with pytest.raises(DatabaseError, match="runs_event"):
        _as("NONE", INSERT, [run.pk, 1, "b" * 64, "a" * 64])
    _as("NONE", INSERT, [run.pk, 1, GENESIS_HASH, "a" * 64])
    assert Event.objects.filter(run=run).count() == 1
