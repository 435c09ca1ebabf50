"""The Event table refuses UPDATE and DELETE in the database itself, whoever sends the SQL."""

from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from rest_framework.test import APIClient

from runs.chain import run_chain_breaks
from runs.models import Event, Run
from tests.runs.journal_client import JournalClient


@pytest.fixture
def journalled_run(api: APIClient) -> str:
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    epoch = journal.lease(run_id).json()["epoch"]
    journal.write_step(run_id, epoch, 0, tokens=3)
    return run_id


def _rows(run_id: str) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq, type, payload::text, actor, at, prev_hash, hash FROM runs_event "
            "WHERE run_id = %s ORDER BY seq",
            [run_id],
        )
        return cursor.fetchall()


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE runs_event SET payload = '{\"forged\": true}' WHERE run_id = %s",
        "UPDATE runs_event SET hash = repeat('0', 64) WHERE run_id = %s",
        "UPDATE runs_event SET actor = 'someone-else' WHERE run_id = %s AND seq = 1",
        "DELETE FROM runs_event WHERE run_id = %s",
        "DELETE FROM runs_event WHERE run_id = %s AND seq = (SELECT max(seq) FROM runs_event WHERE run_id = %s)",
    ],
)
def test_raw_sql_cannot_rewrite_or_erase_history(journalled_run: str, sql: str) -> None:
    before = _rows(journalled_run)
    assert len(before) >= 3
    params = [journalled_run] * sql.count("%s")
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, params)
    assert _rows(journalled_run) == before


def test_the_orm_cannot_rewrite_history_either(journalled_run: str) -> None:
    before = _rows(journalled_run)
    with pytest.raises(DatabaseError), transaction.atomic():
        Event.objects.filter(run_id=journalled_run).update(type="tampered")
    with pytest.raises(DatabaseError), transaction.atomic():
        Event.objects.filter(run_id=journalled_run).first().delete()  # type: ignore[union-attr]
    assert _rows(journalled_run) == before


def test_after_a_refused_tamper_the_journal_appends_and_the_chain_verifies(
    journalled_run: str, api: APIClient
) -> None:
    """The trigger guards history without blocking the journal from appending to it."""
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM runs_event WHERE run_id = %s", [journalled_run])
    journal = JournalClient(api)
    epoch = journal.run(journalled_run)["epoch"]
    journal.write_step(journalled_run, epoch, 1, tokens=2)
    seqs = [r[0] for r in _rows(journalled_run)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) >= 5
    assert not run_chain_breaks(Run.objects.get(pk=journalled_run))
