"""Every run-scoped table can be distributed by run_id (Citus) and partitioned by the run's month.

A distributed table's primary key and every unique constraint must contain the distribution
column, so a table with a `run_id` column has `run_id` in its primary key and in every unique
constraint and unique index (partial ones too). The catalog is the judge, not the models, so
constraints written in raw SQL count as well.
"""

from typing import Any

from django.db import connection


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
