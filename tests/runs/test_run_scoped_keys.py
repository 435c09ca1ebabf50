"""Every run-scoped table can be distributed by run_id (Citus) and partitioned by the run's month.

A distributed table's primary key and every unique constraint must contain the distribution
column, so a table with a `run_id` column has `run_id` in its primary key and in every unique
constraint and unique index (partial ones too). The catalog is the judge, not the models, so
constraints written in raw SQL count as well. A table that hangs off a run (a relation to
the journal, or to a table that does) carries run_id, and the database holds it to its parent's.
"""

from datetime import date
from typing import Any

import pytest
from django.apps import apps
from django.db import IntegrityError, connection, transaction
from django.db.models import Model
from django.utils import timezone

from bench.testdata import runs_bulk_create
from runs.models import Approval, ApprovalRequest, Step


def _run_scoped_tables() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname FROM pg_attribute a
            JOIN pg_class c ON c.oid = a.attrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE a.attname = 'run_id' AND NOT a.attisdropped
              AND c.relkind IN ('r', 'p') AND NOT c.relispartition
              AND n.nspname = current_schema()
            ORDER BY c.relname
            """
        )
        return [name for (name,) in cursor.fetchall()]


def _keys_without_run_id(table: str) -> list[str]:
    """The table's unique indexes (primary key included) that leave run_id out."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT ic.relname, i.indisprimary FROM pg_index i
            JOIN pg_class ic ON ic.oid = i.indexrelid
            WHERE i.indrelid = %s::regclass AND i.indisunique
              AND NOT EXISTS (
                  SELECT 1 FROM pg_attribute a
                  WHERE a.attrelid = i.indrelid AND a.attname = 'run_id'
                    AND a.attnum = ANY (i.indkey::smallint[]))
            ORDER BY ic.relname
            """,
            [table],
        )
        return [f"{name}{' (primary key)' if primary else ''}" for name, primary in cursor]


def test_every_table_with_a_run_id_keys_on_it(db: Any) -> None:
    tables = _run_scoped_tables()
    # the journal and everything hanging off a run: the check has something to check
    assert {"runs_step", "runs_event"} <= set(tables)
    offenders = {table: keys for table in tables if (keys := _keys_without_run_id(table))}
    assert offenders == {}


JOURNAL = {"runs_run", "runs_step", "runs_event"}


def _catalog_references() -> set[tuple[str, str]]:
    """(referencing table, referenced table) for every foreign key the database holds."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT DISTINCT c.conrelid::regclass::text, c.confrelid::regclass::text
            FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
            WHERE c.contype = 'f' AND NOT t.relispartition
            """
        )
        return set(cursor.fetchall())


def _model_references() -> set[tuple[str, str]]:
    """(table, referenced table) for every relation the models declare, those the database
    does not hold as a foreign key (db_constraint=False) included."""
    return {
        (model._meta.db_table, field.related_model._meta.db_table)
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if field.is_relation and field.related_model is not None
    }


def _has_run_id(table: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'run_id' "
            "AND NOT attisdropped",
            [table],
        )
        return cursor.fetchone() is not None


def test_every_table_that_hangs_off_a_run_carries_its_run_id(db: Any) -> None:
    """A table referencing the journal, or a table that does, is run-scoped: it must carry
    run_id, or Citus cannot put its rows on the shard of their run (runs_run is the root: its
    own id is the distribution column; its fork link points at another run)."""
    references = _catalog_references() | _model_references()
    scoped = JOURNAL | set(_run_scoped_tables())
    while grown := {child for child, parent in references if parent in scoped} - scoped:
        scoped |= grown
    # the approvals hang off a step and a request: the closure reaches them
    assert {"runs_approvalrequest", "runs_approval", "review_escalation"} <= scoped
    assert sorted(t for t in scoped - {"runs_run"} if not _has_run_id(t)) == []


def _refusal(model: type[Model], **fields: Any) -> str:
    """The database's refusal of a row with these fields (its deferred foreign keys checked at
    once, in a savepoint the test goes on after)."""
    with pytest.raises(IntegrityError) as refused, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        model._default_manager.create(**fields)
    return str(refused.value)


def test_the_database_refuses_an_approval_request_whose_run_is_not_its_steps(db: Any) -> None:
    mine, other = runs_bulk_create(runs=2, steps_per_run=1, status="running")
    step = Step.objects.get(run_id=mine)
    request: dict[str, Any] = {
        "step": step,
        "arguments_hash": step.arguments_hash,
        "approvals_required": 1,
        "requested_at": timezone.now(),
    }

    assert "approval_request_step_fk" in _refusal(
        ApprovalRequest, run_id=other, journal_month=step.journal_month, **request
    )
    # the right run but not its month: the step's key refuses it too
    assert "approval_request_step_fk" in _refusal(
        ApprovalRequest, run_id=mine, journal_month=date(2001, 1, 1), **request
    )
    made = ApprovalRequest.objects.create(run_id=mine, journal_month=step.journal_month, **request)
    # an approval names its request's run
    assert "approval_request_fk" in _refusal(
        Approval, run_id=other, request=made, by="ana", at=timezone.now()
    )
